//go:build !linux

package dataplane

// wireSocket: socket options are set on Linux only; elsewhere the Bind keeps its defaults.
type wireSocket struct{ v6 bool }

func findWireSockets(port uint16) []wireSocket { return nil }

func (wireSocket) sendWithoutDF() error { return nil }

func (wireSocket) setDF(bool) error { return errNoDF }

func (wireSocket) close() {}
