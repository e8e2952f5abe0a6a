// Pod traffic masqueraded by the CNI. Many CNIs source-NAT pod traffic to anything outside
// their own pod CIDR; traffic to a peer's (remapped) CIDRs then leaves through the overlay with
// the node's address, the peer's gateway drops it (it is not from this cluster's pods), and
// nothing says why. The host SNAT table counts such connections (kernel.HostSNAT); the agent
// turns the count into the PodTrafficMasqueraded condition of its InternalNode, a log line and
// a metric, and with --masquerade-bypass the table exempts pod traffic to peers from every
// other NAT rule.

package agent

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConditionMasqueraded is the InternalNode condition the agent reports: True while pod
// connections to peers leave the node source-NATed by a rule that is not skein's.
const ConditionMasqueraded = "PodTrafficMasqueraded"

// MasqueradeMemory is how long the condition stays True after the last masqueraded connection.
const MasqueradeMemory = 10 * time.Minute

// masqueradeWatch is what the agent remembers of the count between reconciles.
type masqueradeWatch struct {
	read      bool      // a reading was taken since the agent started
	last      uint64    // the counter's last reading
	fresh     bool      // the table was replaced since: the next reading counts from zero
	firstSeen time.Time // first masqueraded connection of the current episode
	lastSeen  time.Time // latest masqueraded connection
}

// replaced notes that the agent replaced the table (its counter starts again from zero).
func (w *masqueradeWatch) replaced() { w.fresh = true }

// observe takes a reading of the counter and returns how many connections it adds. The first
// reading of a started agent is only a baseline (the table outlives agent restarts; its count
// is history); after the agent replaced the table, or when the reading went down (someone
// else replaced it), the count starts from zero.
func (w *masqueradeWatch) observe(n uint64, now time.Time) uint64 {
	var delta uint64
	switch {
	case !w.read:
		w.read = true
	case w.fresh || n < w.last:
		delta = n
	default:
		delta = n - w.last
	}
	w.last, w.fresh = n, false
	if delta > 0 {
		if w.lastSeen.IsZero() || now.Sub(w.lastSeen) > MasqueradeMemory {
			w.firstSeen = now
		}
		w.lastSeen = now
	}
	return delta
}

// condition is the PodTrafficMasqueraded condition for now.
func (w *masqueradeWatch) condition(bypass bool, now time.Time) metav1.Condition {
	c := metav1.Condition{Type: ConditionMasqueraded}
	recent := !w.lastSeen.IsZero() && now.Sub(w.lastSeen) <= MasqueradeMemory
	switch {
	case bypass && recent:
		c.Status, c.Reason = metav1.ConditionTrue, "MasqueradedDespiteBypass"
		c.Message = fmt.Sprintf("since %s, pod connections to peer clusters leave this node source-NATed although the masquerade bypass is on: "+
			"a NAT rule runs before the bypass (a priority below srcnat-10) or outside netfilter (eBPF); exempt the peers' CIDRs as seen here "+
			"(kubectl get configurations -A) in the CNI", w.firstSeen.UTC().Format(time.RFC3339))
	case bypass:
		c.Status, c.Reason = metav1.ConditionFalse, "Bypassed"
		c.Message = "the agent's masquerade bypass is on: pod traffic to peer clusters keeps its source whatever the node's other NAT rules say"
	case recent:
		c.Status, c.Reason = metav1.ConditionTrue, "MasqueradedByAnotherRule"
		c.Message = fmt.Sprintf("since %s, pod connections to peer clusters leave this node source-NATed by a rule that is not skein's "+
			"(the CNI's masquerade?): peers see the node's address instead of the pod's and drop the traffic. Set the chart's "+
			"agent.masqueradeBypass=true (skein-agent --masquerade-bypass), or exempt the peers' CIDRs as seen here "+
			"(kubectl get configurations -A) from the CNI's masquerade; skein_agent_masqueraded_connections_total counts them",
			w.firstSeen.UTC().Format(time.RFC3339))
	default:
		c.Status, c.Reason = metav1.ConditionFalse, "NotSeen"
		c.Message = fmt.Sprintf("no pod connection to a peer cluster left this node source-NATed by another rule in the last %v", MasqueradeMemory)
	}
	return c
}

// watchMasquerade reads the counter, logs and counts what it adds, and returns the
// PodTrafficMasqueraded condition (nil when there is no counter to read).
func (a *Agent) watchMasquerade(bypass bool) (*metav1.Condition, error) {
	if a.opts.Masqueraded == nil {
		return nil, nil
	}
	n, ok, err := a.opts.Masqueraded()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if !ok {
		// No table, so no count (a node without an external IP has no host SNAT): nothing
		// to say either way.
		return nil, nil
	}
	if delta := a.masq.observe(n, now); delta > 0 {
		a.stats.Masqueraded += delta
		a.opts.Log.Warn("pod connections to peer clusters were source-NATed by a rule that is not skein's; peers drop them (see the InternalNode's PodTrafficMasqueraded condition)",
			"connections", delta, "bypass", bypass)
	}
	want := a.masq.condition(bypass, now)
	return &want, nil
}
