package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// InnerMTU is the MTU of the path every rung measures: the tunnel MTU of the spec (1340), set
// on the plain veth too so that every rung moves packets of the same size.
const InnerMTU = 1340

// Env is what rungs build with.
type Env struct {
	// Prefix starts every namespace and interface name of the harness.
	Prefix string
	// Bin holds wireguard-go, lab-probe and skein-gateway (see Prepare).
	Bin string
	// Work is a scratch directory (keys, configs, logs).
	Work string
	Log  *os.File
}

// Path is a built rung: where the client and server run and what carries the traffic.
type Path struct {
	Client, Server netns
	// Addr is the server's address as the client dials it.
	Addr string
	// Gateways are the processes in the middle (wireguard-go, skein-gateway): their CPU time
	// counts towards the rung's CPU per GB, their peak RSS is reported.
	Gateways []*exec.Cmd
}

// Rung is one topology of the ladder.
type Rung interface {
	Name() string
	// Describe says in a line what carries the traffic.
	Describe() string
	Up(e *Env) (*Path, error)
	Down() error
}

// vethRung is the physical limit: two namespaces, one veth pair.
type vethRung struct{ ns []netns }

func (r *vethRung) Name() string { return "veth" }
func (r *vethRung) Describe() string {
	return fmt.Sprintf("two namespaces joined by one veth pair (MTU %d): the machine's limit", InnerMTU)
}

func (r *vethRung) Up(e *Env) (*Path, error) {
	c, err := addNetns(e.Prefix + "-veth-c")
	if err != nil {
		return nil, err
	}
	r.ns = append(r.ns, c)
	s, err := addNetns(e.Prefix + "-veth-s")
	if err != nil {
		return nil, err
	}
	r.ns = append(r.ns, s)
	if err := vethPair(c, "eth0", "10.97.0.1/24", s, "eth0", "10.97.0.2/24", InnerMTU); err != nil {
		return nil, err
	}
	return &Path{Client: c, Server: s, Addr: "10.97.0.2"}, nil
}

func (r *vethRung) Down() error { return removeAll(r.ns) }

func removeAll(ns []netns) error {
	var first error
	for _, n := range ns {
		if err := removeNetns(n); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// wireguardRung is the stock wireguard-go engine on a kernel TUN in each of two namespaces,
// joined by a veth underlay: the engine's own limit, configured with wg.
type wireguardRung struct {
	ns    []netns
	socks []string
}

func (r *wireguardRung) Name() string { return "wireguard-go" }
func (r *wireguardRung) Describe() string {
	return fmt.Sprintf("stock wireguard-go (the version skein pins) on a kernel TUN in two namespaces over a veth, tunnel MTU %d", InnerMTU)
}

func (r *wireguardRung) Up(e *Env) (*Path, error) {
	type side struct {
		ns             netns
		dev, under, in string
		key, pub       string
	}
	sides := []*side{
		{dev: e.Prefix + "wgc", under: "10.98.0.1", in: "10.99.0.1"},
		{dev: e.Prefix + "wgs", under: "10.98.0.2", in: "10.99.0.2"},
	}
	for i, sd := range sides {
		n, err := addNetns(fmt.Sprintf("%s-wg-%c", e.Prefix, "cs"[i]))
		if err != nil {
			return nil, err
		}
		r.ns = append(r.ns, n)
		sd.ns = n
		key, err := exec.Command("wg", "genkey").Output()
		if err != nil {
			return nil, fmt.Errorf("wg genkey (Debian package wireguard-tools): %w", err)
		}
		sd.key = strings.TrimSpace(string(key))
		pub := exec.Command("wg", "pubkey")
		pub.Stdin = strings.NewReader(sd.key)
		out, err := pub.Output()
		if err != nil {
			return nil, fmt.Errorf("wg pubkey: %w", err)
		}
		sd.pub = strings.TrimSpace(string(out))
	}
	if err := vethPair(sides[0].ns, "eth0", sides[0].under+"/24", sides[1].ns, "eth0", sides[1].under+"/24", 1500); err != nil {
		return nil, err
	}
	p := &Path{Client: sides[0].ns, Server: sides[1].ns, Addr: sides[1].in}
	for i, sd := range sides {
		peer := sides[1-i]
		cmd, err := sd.ns.start(e.Log, filepath.Join(e.Bin, "wireguard-go"), "-f", sd.dev)
		if err != nil {
			return nil, err
		}
		p.Gateways = append(p.Gateways, cmd)
		sock := "/var/run/wireguard/" + sd.dev + ".sock"
		r.socks = append(r.socks, sock)
		if err := waitFile(sock, 5*time.Second); err != nil {
			return nil, fmt.Errorf("wireguard-go %s: %w", sd.dev, err)
		}
		keyFile := filepath.Join(e.Work, sd.dev+".key")
		if err := os.WriteFile(keyFile, []byte(sd.key+"\n"), 0o600); err != nil {
			return nil, err
		}
		if err := sd.ns.run("wg", "set", sd.dev, "private-key", keyFile, "listen-port", "51820",
			"peer", peer.pub, "allowed-ips", peer.in+"/32", "endpoint", peer.under+":51820"); err != nil {
			return nil, err
		}
		for _, c := range [][]string{
			{"ip", "addr", "add", sd.in + "/24", "dev", sd.dev},
			{"ip", "link", "set", sd.dev, "mtu", fmt.Sprint(InnerMTU), "up"},
		} {
			if err := sd.ns.run(c...); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

func (r *wireguardRung) Down() error {
	err := removeAll(r.ns)
	for _, s := range r.socks {
		_ = os.Remove(s)
	}
	return err
}

func waitFile(path string, d time.Duration) error {
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear in %s", path, d)
		}
	}
}
