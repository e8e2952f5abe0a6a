package dataplane

import "time"

// SetClock replaces the PathBind's clock (tests of GSOHold).
func (p *PathBind) SetClock(now func() time.Time) { p.now = now }

// Arm makes the next data datagram the PathBind sends a probe of wireLen bytes.
func (p *PathBind) Arm(wireLen int) *Probe {
	pr := &Probe{wireLen: wireLen}
	p.arm(pr)
	return pr
}
