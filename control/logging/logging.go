// Package logging builds the structured logger of skein's daemons from the two flags they all
// take, --log-level and --log-format, so that the controller, the agent and the gateway log
// alike. It depends on the standard library alone (the agent's memory budget).
package logging

import (
	"fmt"
	"io"
	"log/slog"
)

// Formats and levels the flags accept.
const (
	FormatText = "text"
	FormatJSON = "json"
	// LevelUsage and FormatUsage are the flags' help texts.
	LevelUsage  = "debug, info, warn or error"
	FormatUsage = "text (key=value) or json (one object a line, for log collectors)"
)

// New returns a logger writing to w at level ("debug", "info", "warn", "error") in format
// ("text" or "json"). The error names the flag to fix.
func New(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want %s", level, LevelUsage)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case FormatText:
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case FormatJSON:
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}
