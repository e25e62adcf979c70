package tpmjsdoor

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc/status"

	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// Limits of GET /api/tools/search.
const (
	defaultSearchLimit = 5
	maxSearchLimit     = 50
	maxQueryBytes      = 256
	// listAll asks ListToolsAs for every match, so that the exact name can
	// be ranked first before the answer is cut to the caller's limit.
	listAll = 1000
)

// searchReply is the registry search answer in the shape the published
// @tpmjs/registry-search and @tpmjs/registry-execute 0.1.5 read.
type searchReply struct {
	Success bool          `json:"success"`
	Query   string        `json:"query"`
	Results searchResults `json:"results"`
}

type searchResults struct {
	Total int          `json:"total"`
	Tools []searchTool `json:"tools"`
}

// searchTool is one listed tool. qualityScore is always null: the gateway
// does not rate tools.
type searchTool struct {
	Name            string         `json:"name"`
	Description     string         `json:"description"`
	ExecutionHealth string         `json:"executionHealth"`
	QualityScore    *float64       `json:"qualityScore"`
	Package         searchPackage  `json:"package"`
	Toolgate        searchToolgate `json:"toolgate"`
}

type searchPackage struct {
	NPMPackageName string      `json:"npmPackageName"`
	NPMVersion     string      `json:"npmVersion"`
	Category       string      `json:"category"`
	Env            []searchEnv `json:"env"`
}

// searchEnv names a variable the caller may set; never a value.
type searchEnv struct {
	Name     string `json:"name"`
	Required bool   `json:"required"`
}

type searchToolgate struct {
	ToolID string   `json:"tool_id"`
	Driver string   `json:"driver"`
	Tags   []string `json:"tags"`
}

// search serves GET /api/tools/search?q=&limit=: the catalog's tools that
// policy could allow the caller (as ListTools decides them), the exact name
// first, each in the registry's shape. Registry ids are not listed, and
// non-TPMJS tools only when catalog_package is set.
func (d *Door) search(w http.ResponseWriter, r *http.Request) {
	caller, ok := d.caller(w, r)
	if !ok {
		return
	}
	q := r.URL.Query().Get("q")
	limit, err := searchLimit(r.URL.Query().Get("limit"))
	if err == nil {
		err = checkQuery(q)
	}
	if err != nil {
		d.writeBadRequest(w, err, 0)
		return
	}
	list, err := d.gw.ListToolsAs(r.Context(), caller.Caller, caller.Identity, &toolgatev1.ListToolsRequest{
		Query: q, Limit: listAll, PolicyRef: r.Header.Get(headerPolicyRef),
	})
	if err != nil {
		code, protoCode := statusFor(err)
		d.writeError(w, code, protoCode, status.Convert(err).Message(), 0)
		return
	}
	health := d.executionHealth()
	tools := make([]searchTool, 0, len(list.GetTools()))
	for _, info := range list.GetTools() {
		if t, ok := d.searchEntry(info.GetToolId(), health); ok {
			tools = append(tools, t)
		}
	}
	rankExactFirst(tools, q)
	if len(tools) > limit {
		tools = tools[:limit]
	}
	d.writeJSON(w, http.StatusOK, searchReply{Success: true, Query: q, Results: searchResults{Total: len(tools), Tools: tools}})
}

// searchEntry describes one catalog tool, or reports false for a tool the
// door cannot run (a non-TPMJS tool while catalog_package is off).
func (d *Door) searchEntry(id string, health map[string]string) (searchTool, bool) {
	e, ok := d.byID[id]
	if !ok {
		return searchTool{}, false
	}
	t := searchTool{
		Description: e.Description, ExecutionHealth: health[e.Driver],
		Package:  searchPackage{NPMVersion: e.Version, Category: "other", Env: []searchEnv{}},
		Toolgate: searchToolgate{ToolID: e.ID, Driver: e.Driver, Tags: nonNil(e.Tags)},
	}
	if t.ExecutionHealth == "" {
		t.ExecutionHealth = "UNKNOWN"
	}
	switch {
	case e.Package != "":
		t.Name, t.Package.NPMPackageName = e.Target, e.Package
	case d.catalogPackage != "":
		t.Name, t.Package.NPMPackageName = e.ID, d.catalogPackage
	default:
		return searchTool{}, false
	}
	if t.Package.NPMVersion == "" {
		t.Package.NPMVersion = "latest"
	}
	if len(e.Tags) > 0 {
		t.Package.Category = e.Tags[0]
	}
	for _, name := range e.CallerEnv {
		t.Package.Env = append(t.Package.Env, searchEnv{Name: name})
	}
	return t, true
}

// rankExactFirst orders tools named exactly q first, then by tool id: the
// published client asks for 10 results and looks for the exact name.
func rankExactFirst(tools []searchTool, q string) {
	slices.SortStableFunc(tools, func(a, b searchTool) int {
		ae, be := a.Name == q, b.Name == q
		switch {
		case ae && !be:
			return -1
		case be && !ae:
			return 1
		}
		return strings.Compare(a.Toolgate.ToolID, b.Toolgate.ToolID)
	})
}

// executionHealth maps each driver's cached health onto the registry's
// words.
func (d *Door) executionHealth() map[string]string {
	out := map[string]string{}
	for name, h := range d.gw.DriverHealth() {
		out[name] = "BROKEN"
		if h.Healthy {
			out[name] = "HEALTHY"
		}
	}
	return out
}

// searchLimit parses limit: default 5, at most 50.
func searchLimit(s string) (int, error) {
	if s == "" {
		return defaultSearchLimit, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, badf("limit: want a positive whole number")
	}
	return min(n, maxSearchLimit), nil
}

// checkQuery allows printable text of at most 256 bytes.
func checkQuery(q string) error {
	if len(q) > maxQueryBytes {
		return badf("q: longer than %d bytes", maxQueryBytes)
	}
	if !utf8.ValidString(q) {
		return badf("q: not valid UTF-8")
	}
	for _, c := range q {
		if !unicode.IsPrint(c) {
			return badf("q: contains a character that is not printable")
		}
	}
	return nil
}
