package browse

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/toolgate/toolgate/evidence"
)

// verifyJob is a whole-bucket verification the verify page started: it
// runs evidence.VerifyAll, the library `toolgate evidence verify --all`
// uses, in the background, and the page shows its progress.
type verifyJob struct {
	done  chan struct{}
	state verifyState
}

// verifyState is a job's progress and result.
type verifyState struct {
	Checked  int
	Failed   int
	Tampered int
	Logs     int
	Err      string
	Finished bool
	Started  time.Time
	Elapsed  string
	Total    int
	// Bad lists the failed requests' reports (at most maxBadShown).
	Bad []evidence.VerifyReport
	// all is every report, for the download.
	all []evidence.VerifyReport
}

// maxBadShown bounds the failures the page lists.
const maxBadShown = 200

func (s *Server) verifyPage(w http.ResponseWriter, r *http.Request, ss *session, _ string) {
	st, running := s.verifySnapshot()
	if st != nil {
		st.Bad = s.readableReports(r.Context(), ss, st.Bad)
	}
	s.render(w, http.StatusOK, "verify", ss, struct {
		Job     *verifyState
		Running bool
	}{st, running})
}

// verifySnapshot copies the job's state.
func (s *Server) verifySnapshot() (*verifyState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.verify == nil {
		return nil, false
	}
	st := s.verify.state
	st.all = nil
	st.Bad = append([]evidence.VerifyReport(nil), st.Bad...)
	end := s.opts.Now()
	st.Elapsed = end.Sub(st.Started).Round(time.Millisecond).String()
	return &st, !st.Finished
}

func (s *Server) verifyStart(w http.ResponseWriter, r *http.Request, _ *session, _ string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.verify != nil && !s.verify.state.Finished {
		http.Redirect(w, r, "/verify", http.StatusSeeOther)
		return
	}
	job := &verifyJob{done: make(chan struct{}), state: verifyState{Started: s.opts.Now(), Total: s.opts.Index.Len()}}
	s.verify = job
	// The job outlives the request that started it.
	go s.runVerify(context.WithoutCancel(r.Context()), job)
	http.Redirect(w, r, "/verify", http.StatusSeeOther)
}

func (s *Server) runVerify(ctx context.Context, job *verifyJob) {
	defer close(job.done)
	opts := s.opts.Verify
	opts.OnLog = func(evidence.LogReport) error {
		s.mu.Lock()
		job.state.Logs++
		s.mu.Unlock()
		return nil
	}
	err := evidence.VerifyAll(ctx, s.opts.Store, opts, func(rep evidence.VerifyReport) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		job.state.Checked++
		job.state.all = append(job.state.all, rep)
		if rep.Failed() {
			job.state.Failed++
			if rep.Tampered() {
				job.state.Tampered++
			}
			if len(job.state.Bad) < maxBadShown {
				job.state.Bad = append(job.state.Bad, rep)
			}
		}
		return nil
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		job.state.Err = err.Error()
	}
	job.state.Finished = true
}

func (s *Server) verifyReport(w http.ResponseWriter, r *http.Request, ss *session, _ string) {
	s.mu.Lock()
	var all []evidence.VerifyReport
	finished := s.verify != nil && s.verify.state.Finished
	if finished {
		all = s.verify.state.all
	}
	s.mu.Unlock()
	if !finished {
		s.fail(w, http.StatusNotFound, ss, "No finished verification to download; start one on the Verify page.")
		return
	}
	var data []byte
	for _, rep := range s.readableReports(r.Context(), ss, all) {
		line, err := json.Marshal(struct {
			evidence.VerifyReport
			Verdict string `json:"verdict"`
		}{rep, rep.Verdict()})
		if err != nil {
			s.fail(w, http.StatusInternalServerError, ss, err.Error())
			return
		}
		data = append(append(data, line...), '\n')
	}
	download(w, "toolgate-verify-report.jsonl", data)
}

// readableReports keeps the reports of the requests the person may read;
// without Access, all of them. A report of a request the index does not
// know (a stray key, a request logged but gone) is shown only without
// Access.
func (s *Server) readableReports(ctx context.Context, ss *session, reps []evidence.VerifyReport) []evidence.VerifyReport {
	if s.opts.Access == nil {
		return reps
	}
	visible := s.visible(ctx, ss)
	var out []evidence.VerifyReport
	for _, rep := range reps {
		if sum, ok := s.opts.Index.Get(rep.RequestID); ok && visible(&sum) {
			out = append(out, rep)
		}
	}
	return out
}
