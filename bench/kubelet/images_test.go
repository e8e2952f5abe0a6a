package kubelet

import (
	"archive/tar"
	"bytes"
	"io"
	"log"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/skein-net/skein/deploy/images"
)

// TestPull: an image of the registry is pulled for this platform, unpacked once, and its
// entrypoint returned with repository@digest; a layer entry named ../../escaped stays inside
// the image's root.
func TestPull(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	k := &Kubelet{o: Options{Registry: host, StateDir: t.TempDir()}, log: slog.New(slog.DiscardHandler)}

	p := images.Platform{OS: "linux", Arch: runtime.GOARCH}
	c := images.Component{Name: "skein-hello"}
	idx, err := images.Index(c, []images.Platform{p}, map[images.Platform][]byte{p: []byte("\x7fELF not really")},
		images.Meta{Version: "v0", Revision: "r", Created: time.Unix(0, 0)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref := host + "/skein-net/skein-hello:v0"
	r, _ := name.ParseReference(ref, name.Insecure)
	if err := remote.WriteIndex(r, idx); err != nil {
		t.Fatal(err)
	}
	if !k.fromRegistry(ref) || k.fromRegistry("skein-hello:v0") {
		t.Error("fromRegistry")
	}
	for range 2 { // the second time from the unpacked copy
		bin, id, err := k.pull(ref)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(bin)
		if err != nil || string(b) != "\x7fELF not really" || !strings.HasSuffix(bin, "/rootfs/usr/local/bin/skein-hello") {
			t.Errorf("entrypoint %s: %q %v", bin, b, err)
		}
		if fi, err := os.Stat(bin); err != nil || fi.Mode()&0o111 == 0 {
			t.Errorf("entrypoint %s not executable: %v", bin, err)
		}
		if !strings.HasPrefix(id, host+"/skein-net/skein-hello@sha256:") {
			t.Errorf("image ID %q", id)
		}
	}

	// A layer that writes outside the image's root.
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: "../../escaped", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte("x"))
	_ = tw.Close()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config.Entrypoint = "linux", runtime.GOARCH, []string{"/escaped"}
	img, _ = mutate.ConfigFile(img, cf)
	bad := host + "/skein-net/bad:v0"
	rb, _ := name.ParseReference(bad, name.Insecure)
	if err := remote.Write(rb, img); err != nil {
		t.Fatal(err)
	}
	if _, _, err := k.pull(bad); err != nil {
		t.Fatal(err)
	}
	// Joined as it is, the name would have landed in images/, next to the images' roots; it
	// may land inside the root or be dropped, nowhere else.
	_ = filepath.Walk(filepath.Dir(k.o.StateDir), func(path string, fi os.FileInfo, err error) error {
		if err == nil && fi.Name() == "escaped" && !strings.Contains(path, "/rootfs/") {
			t.Errorf("the escaping entry was written at %s, outside the image's root", path)
		}
		return nil
	})
}

func TestInRoot(t *testing.T) {
	for name, want := range map[string]string{
		"usr/local/bin/x": "/r/usr/local/bin/x", "/etc/passwd": "/r/etc/passwd", "../../escaped": "/r/escaped",
		"a/../../b": "/r/b", "./c": "/r/c", "..": "/r", "/": "/r",
	} {
		if got := inRoot("/r", name); got != want {
			t.Errorf("inRoot(/r, %q) = %s, want %s", name, got, want)
		}
	}
}
