package loop

import (
	"context"
	"fmt"
	"log/slog"
)

// gnetLogger adapts gnet's printf-style logger to slog.
type gnetLogger struct{ l *slog.Logger }

func (g gnetLogger) logf(level slog.Level, format string, args ...any) {
	if g.l.Enabled(context.Background(), level) {
		g.l.Log(context.Background(), level, fmt.Sprintf(format, args...), "component", "gnet")
	}
}

func (g gnetLogger) Debugf(format string, args ...any) { g.logf(slog.LevelDebug, format, args...) }
func (g gnetLogger) Infof(format string, args ...any)  { g.logf(slog.LevelDebug, format, args...) }
func (g gnetLogger) Warnf(format string, args ...any)  { g.logf(slog.LevelWarn, format, args...) }
func (g gnetLogger) Errorf(format string, args ...any) { g.logf(slog.LevelError, format, args...) }
func (g gnetLogger) Fatalf(format string, args ...any) { g.logf(slog.LevelError, format, args...) }
