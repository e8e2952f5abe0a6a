//go:build !linux

package appliance

// dropImagePages does nothing where there is no /proc/self/smaps.
func dropImagePages() (int64, error) { return 0, nil }
