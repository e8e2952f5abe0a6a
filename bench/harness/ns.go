package harness

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// netns is a network namespace a rung made; everything in it goes with it on remove.
type netns string

func sh(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// run runs a command in the namespace.
func (n netns) run(args ...string) error {
	return sh(append([]string{"ip", "netns", "exec", string(n)}, args...)...)
}

// output runs a command in the namespace and returns its standard output.
func (n netns) output(args ...string) (string, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", string(n)}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr))
	}
	return string(out), nil
}

// start starts a long-running process in the namespace; it dies with the harness
// (Pdeathsig) and with the namespace's removal.
func (n netns) start(logTo *os.File, args ...string) (*exec.Cmd, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", string(n)}, args...)...)
	cmd.Stdout, cmd.Stderr = logTo, logTo
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s in %s: %w", args[0], n, err)
	}
	return cmd, nil
}

func addNetns(name string) (netns, error) {
	_ = removeNetns(netns(name)) // a leftover of an interrupted run
	if err := sh("ip", "netns", "add", name); err != nil {
		return "", err
	}
	n := netns(name)
	return n, n.run("ip", "link", "set", "lo", "up")
}

// removeNetns kills every process in the namespace and deletes it.
func removeNetns(n netns) error {
	if out, err := exec.Command("ip", "netns", "pids", string(n)).Output(); err == nil {
		for _, p := range strings.Fields(string(out)) {
			_ = exec.Command("kill", "-9", p).Run()
		}
	}
	if _, err := os.Stat("/run/netns/" + string(n)); err != nil {
		return nil
	}
	return sh("ip", "netns", "del", string(n))
}

// vethPair joins namespaces a and b with a veth pair (ends named an and bn), addresses in CIDR
// notation and the MTU set, both ends up.
func vethPair(a netns, an, aAddr string, b netns, bn, bAddr string, mtu int) error {
	if err := a.run("ip", "link", "add", an, "mtu", fmt.Sprint(mtu), "type", "veth", "peer", "name", bn, "mtu", fmt.Sprint(mtu), "netns", string(b)); err != nil {
		return err
	}
	for _, e := range []struct {
		n         netns
		dev, addr string
	}{{a, an, aAddr}, {b, bn, bAddr}} {
		if e.addr != "" {
			if err := e.n.run("ip", "addr", "add", e.addr, "dev", e.dev); err != nil {
				return err
			}
		}
		if err := e.n.run("ip", "link", "set", e.dev, "up"); err != nil {
			return err
		}
	}
	return nil
}
