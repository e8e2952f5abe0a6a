package lab

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

func TestReadSubnetEnv(t *testing.T) {
	f := filepath.Join(t.TempDir(), "subnet.env")
	text := "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n\nnot a pair\n"
	if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	env, err := readSubnetEnv(f)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"FLANNEL_NETWORK": "10.244.0.0/16", "FLANNEL_SUBNET": "10.244.1.1/24", "FLANNEL_MTU": "1450", "FLANNEL_IPMASQ": "true"} {
		if env[k] != want {
			t.Errorf("%s = %q, want %q", k, env[k], want)
		}
	}
	if len(env) != 4 {
		t.Errorf("parsed %d keys, want 4: %v", len(env), env)
	}
	if _, err := readSubnetEnv(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing subnet file: no error")
	}
}

// TestHostBinaryImage: the image of a dynamically linked program holds the program, the
// libraries and loader ldd names, and /tmp, and runs the program as nobody.
func TestHostBinaryImage(t *testing.T) {
	program := "/usr/bin/true"
	if _, err := os.Stat(program); err != nil {
		t.Skip("no /usr/bin/true on this machine")
	}
	img, err := hostBinaryImage(program)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65534:65534" || len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != program {
		t.Errorf("config: user %q, entrypoint %v", cf.Config.User, cf.Config.Entrypoint)
	}
	files := map[string]byte{}
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files["/"+strings.TrimSuffix(h.Name, "/")] = h.Typeflag
	}
	var libc, loader bool
	for name, typ := range files {
		libc = libc || (strings.Contains(name, "/libc.so") && typ == tar.TypeReg)
		loader = loader || (strings.Contains(name, "/ld-linux") && typ == tar.TypeReg)
	}
	if files[program] != tar.TypeReg || files["/tmp"] != tar.TypeDir || !libc || !loader {
		t.Errorf("image files %v: want %s, /tmp, libc and the loader", files, program)
	}
}

func TestCheckPrefix(t *testing.T) {
	for _, good := range []string{"skl", "se4194304", "a", "atk1", "abcdefghijkl"} {
		if err := CheckPrefix(good); err != nil {
			t.Errorf("CheckPrefix(%q) = %v, want nil", good, err)
		}
	}
	for _, bad := range []string{"", "x/../../../etc", "../x", "atk?", "*", "se1-c0", "Abc", "1abc", "a b", "abcdefghijklm", "a.b"} {
		if err := CheckPrefix(bad); err == nil {
			t.Errorf("CheckPrefix(%q) = nil, want an error", bad)
		}
	}
	// Down refuses such a prefix before it touches anything.
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.Mkdir(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel("/var/tmp", victim)
	if err != nil {
		t.Fatal(err)
	}
	if err := Down("x/../" + rel); err == nil {
		t.Error("Down of a prefix with a path in it: no error")
	}
	if _, err := os.Stat(victim); err != nil {
		t.Errorf("Down of a bad prefix removed %s: %v", victim, err)
	}
}

// TestClaim: a state dir whose owner (the process starting that lab) is alive is not taken;
// one whose owner is dead is.
func TestClaim(t *testing.T) {
	prefix := fmt.Sprintf("ztc%d", os.Getpid())
	dir := DefaultStateDir(prefix)
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(fmt.Sprintf("%d\n", os.Getppid())), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := claim(prefix, dir); !errors.Is(err, ErrAlreadyUp) {
		t.Errorf("claim of a state dir a live process owns: %v, want ErrAlreadyUp", err)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(fmt.Sprintf("%d\n", dead.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "leftover"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := claim(prefix, dir); err != nil {
		t.Fatalf("claim of a dead lab's state dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "leftover")); !os.IsNotExist(err) {
		t.Errorf("the dead lab's files are still there: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ownerFile)); strings.TrimSpace(string(b)) != fmt.Sprint(os.Getpid()) {
		t.Errorf("owner file says %q, want this process", b)
	}
}
