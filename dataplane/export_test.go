package dataplane

import "time"

// SetClock replaces the PathBind's clock (tests of GSOHold).
func (p *PathBind) SetClock(now func() time.Time) { p.now = now }
