package lab

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/skein-net/skein/deploy/images"
)

// IperfImage is the lab's iperf3 server image (made from this machine's iperf3, Debian's
// package, and the libraries it links), in the lab's registry when the nodes run the real stack.
const IperfImage = RegistryAddr + "/" + IperfRef

// IperfRef is IperfImage's repository and tag in the lab's registry (of either family).
const IperfRef = "skein-net/iperf3:lab"

// hostBinaryImage packs a dynamically linked program of this machine into a one-layer image:
// the program, every library ldd names for it (at the path ldd gives) and an empty /tmp,
// running as nobody with the program as entrypoint.
func hostBinaryImage(program string) (v1.Image, error) {
	out, err := exec.Command("ldd", program).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", program, err)
	}
	files := map[string]string{program: program} // path in the image -> file here
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			files[f[2]] = f[2]
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			files[f[0]] = f[0] // the dynamic loader
		}
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	dirs := map[string]bool{}
	addDir := func(d string, mode int64) error {
		if d == "." || d == "/" || dirs[d] {
			return nil
		}
		dirs[d] = true
		return tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(d, "/") + "/", Typeflag: tar.TypeDir, Mode: mode, ModTime: epoch})
	}
	if err := addDir("/tmp", 0o1777); err != nil {
		return nil, err
	}
	for _, n := range names {
		var parents []string
		for d := filepath.Dir(n); d != "/"; d = filepath.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			if err := addDir(d, 0o755); err != nil {
				return nil, err
			}
		}
		data, err := os.ReadFile(files[n]) // follows symbolic links: the image holds the file itself
		if err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(n, "/"), Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(data)), ModTime: epoch}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), mutate.Addendum{Layer: layer, MediaType: types.OCILayer})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.User = "65534:65534"
	cf.Config.Entrypoint = []string{program}
	cf.Config.Env = []string{"PATH=/usr/bin:/bin", "LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu:/lib/aarch64-linux-gnu:/usr/lib/aarch64-linux-gnu"}
	return mutate.ConfigFile(img, cf)
}

// iperfLayout adds the iperf3 image (IperfImage) to the OCI layout at dir.
func iperfLayout(dir string) error {
	program, err := exec.LookPath("iperf3")
	if err != nil {
		return fmt.Errorf("lab: iperf3 (Debian package iperf3) is needed for the lab's iperf3 image: %w", err)
	}
	if program, err = filepath.EvalSymlinks(program); err != nil {
		return err
	}
	img, err := hostBinaryImage(program)
	if err != nil {
		return fmt.Errorf("lab: iperf3 image: %w", err)
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}})
	_, tag, _ := strings.Cut(strings.TrimPrefix(IperfImage, RegistryAddr+"/skein-net/"), ":")
	return images.WriteLayout(dir, "iperf3:"+tag, idx)
}
