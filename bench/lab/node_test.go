package lab

import (
	"archive/tar"
	"io"
	"os"
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
