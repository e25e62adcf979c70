// Package logredact passes a gateway's log records through its redactor.
// It never imports gateway.
package logredact

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/toolgate/toolgate/redact"
)

// handler passes every text a log record carries through the
// gateway's redactor before the wrapped handler formats it: the message,
// string attributes, errors and other values that print as text, inside
// groups too. Callers control much of what the gateway logs (tool ids,
// request ids, the errors their arguments cause), so a log line is
// evidence-grade output and gets the same treatment.
type handler struct {
	next slog.Handler
	r    *redact.Redactor
}

// NewHandler returns a slog.Handler that redacts every record with
// r before next handles it.
func NewHandler(next slog.Handler, r *redact.Redactor) slog.Handler {
	if h, ok := next.(*handler); ok && h.r == r {
		return h
	}
	return &handler{next: next, r: r}
}

// Logger returns log with its records redacted by r; a nil log
// discards.
func Logger(log *slog.Logger, r *redact.Redactor) *slog.Logger {
	if log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(NewHandler(log.Handler(), r))
}

func (h *handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

func (h *handler) Handle(ctx context.Context, rec slog.Record) error {
	msg, _ := h.r.String(rec.Message)
	out := slog.NewRecord(rec.Time, rec.Level, msg, rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	redacted := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		redacted[i] = h.attr(a)
	}
	return &handler{next: h.next.WithAttrs(redacted), r: h.r}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{next: h.next.WithGroup(name), r: h.r}
}

// attr returns a with its value redacted. Numbers, booleans, times and
// durations cannot hold a secret worth the name and stay as they are;
// anything else is logged as the redacted text it prints as.
func (h *handler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		s, _ := h.r.String(v.String())
		return slog.String(a.Key, s)
	case slog.KindGroup:
		group := v.Group()
		redacted := make([]any, len(group))
		for i, g := range group {
			redacted[i] = h.attr(g)
		}
		return slog.Group(a.Key, redacted...)
	case slog.KindAny:
		var text string
		switch x := v.Any().(type) {
		case nil:
			return a
		case error:
			text = x.Error()
		default:
			text = fmt.Sprint(x)
		}
		s, _ := h.r.String(text)
		return slog.String(a.Key, s)
	default:
		return slog.Attr{Key: a.Key, Value: v}
	}
}
