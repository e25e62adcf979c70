package mcpdoor

import (
	"context"
	"log/slog"
)

// sdkLogHandler passes the SDK's warnings and errors to the gateway's
// logger and drops the rest: in stateless mode the SDK logs a session's
// connect and disconnect, at Info, for every request.
type sdkLogHandler struct{ slog.Handler }

func (h sdkLogHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && h.Handler.Enabled(ctx, l)
}

func (h sdkLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return sdkLogHandler{h.Handler.WithAttrs(attrs)}
}

func (h sdkLogHandler) WithGroup(name string) slog.Handler {
	return sdkLogHandler{h.Handler.WithGroup(name)}
}

// sdkLogger is log for the SDK.
func sdkLogger(log *slog.Logger) *slog.Logger {
	return slog.New(sdkLogHandler{log.Handler()}).With("component", "mcp-sdk")
}
