// Package images builds skein's OCI images without a container engine: each image is one
// layer holding a static binary (and, without a base image, the /etc/passwd and /etc/group of
// the user it runs as) on top of nothing, or of BASE_IMAGE. The images of one component for
// every platform go into one OCI index. Everything that could vary between two builds of one
// commit is fixed (file times and owners, entry order, the creation time from
// SOURCE_DATE_EPOCH, gzip level), so the index digest is a function of the binaries and the
// metadata: two builds of a commit give one digest.
package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Platform is one OS and architecture an image is built for.
type Platform struct {
	OS, Arch, Variant string
}

func (p Platform) String() string {
	s := p.OS + "/" + p.Arch
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// ParsePlatform reads "linux/arm64" or "linux/arm64/v8".
func ParsePlatform(s string) (Platform, error) {
	f := strings.Split(s, "/")
	if len(f) < 2 || len(f) > 3 || f[0] == "" || f[1] == "" {
		return Platform{}, fmt.Errorf("platform %q: want os/arch or os/arch/variant, such as linux/arm64", s)
	}
	p := Platform{OS: f[0], Arch: f[1]}
	if len(f) == 3 {
		p.Variant = f[2]
	}
	return p, nil
}

// DefaultPlatforms are the platforms `make images` builds.
var DefaultPlatforms = []Platform{{OS: "linux", Arch: "amd64"}, {OS: "linux", Arch: "arm64"}}

// UID and GID the images run as: nobody, as the chart's securityContext says (runAsUser
// 65534). The agent's image too: the chart runs the agent as root with NET_ADMIN (it programs
// the node's network), so its image's user is overridden either way.
const (
	UID = 65534
	GID = 65534
)

// Component is one image: a binary and what the image says about it.
type Component struct {
	// Name is the image's name and the binary's, such as skein-gateway.
	Name string
	// Package is the Go package of its main, such as ./cmd/skein-gateway.
	Package string
	// Description goes into the org.opencontainers.image.description annotation.
	Description string
}

// Components are skein's images.
var Components = []Component{
	{Name: "skein-controller", Package: "./cmd/skein-controller", Description: "skein's controller: reconciles the networking.liqo.io resources, IPAM and gateway rendering"},
	{Name: "skein-agent", Package: "./cmd/skein-agent", Description: "skein's node agent: the overlay device, routes and rules of table 18952 on every node"},
	{Name: "skein-gateway", Package: "./cmd/skein-gateway", Description: "skein's gateway: wireguard-go and a userspace dataplane with in-process NAT, unprivileged"},
	{Name: "skein-probe", Package: "./cmd/skein-probe", Description: "skein's probe: TCP, UDP and HTTP echo and calls, for connectivity tests"},
}

// ComponentNamed finds a component by name.
func ComponentNamed(name string) (Component, bool) {
	for _, c := range Components {
		if c.Name == name {
			return c, true
		}
	}
	return Component{}, false
}

// Meta is what every image of a build says about where it comes from.
type Meta struct {
	Version  string    // such as v0.2.0
	Revision string    // the commit
	Source   string    // the repository's URL
	Created  time.Time // SOURCE_DATE_EPOCH: the commit's time, for reproducible builds
}

// annotations are the OCI annotations of a manifest or index of c.
func (m Meta) annotations(c Component) map[string]string {
	a := map[string]string{
		"org.opencontainers.image.title":       c.Name,
		"org.opencontainers.image.description": c.Description,
		"org.opencontainers.image.version":     m.Version,
		"org.opencontainers.image.revision":    m.Revision,
		"org.opencontainers.image.created":     m.Created.UTC().Format(time.RFC3339),
		"org.opencontainers.image.licenses":    "Apache-2.0",
	}
	if m.Source != "" {
		a["org.opencontainers.image.source"] = m.Source
	}
	return a
}

// BinaryPath is where an image holds its component's binary.
func BinaryPath(c Component) string { return "/usr/local/bin/" + c.Name }

// passwd and group hold root and the user the images run as.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
	group  = "root:x:0:\nnobody:x:65534:\n"
)

// file is one regular file of a layer.
type file struct {
	path string
	mode int64
	data []byte
}

// layerTar writes files, and the directories above them, as a tar with every entry owned by
// root, timed at mtime and sorted by name (parents first).
func layerTar(files []file, mtime time.Time) ([]byte, error) {
	regular, dirs := map[string]file{}, map[string]bool{}
	for _, f := range files {
		p := strings.TrimPrefix(path.Clean("/"+f.path), "/")
		regular[p] = f
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	names := make([]string, 0, len(regular)+len(dirs))
	for n := range regular {
		names = append(names, n)
	}
	for d := range dirs {
		names = append(names, d)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		h := &tar.Header{Name: n, ModTime: mtime, Format: tar.FormatPAX}
		f, isFile := regular[n]
		if isFile {
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, f.mode, int64(len(f.data))
		} else {
			h.Typeflag, h.Mode, h.Name = tar.TypeDir, 0o755, n+"/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if isFile {
			if _, err := tw.Write(f.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Image builds c's image for one platform from its binary, on base (nil: nothing; then the
// layer carries /etc/passwd and /etc/group too).
func Image(c Component, p Platform, binary []byte, m Meta, base v1.Image) (v1.Image, error) {
	created := m.Created.UTC()
	files := []file{{path: BinaryPath(c), mode: 0o755, data: binary}}
	img := base
	if img == nil {
		files = append(files, file{path: "/etc/passwd", mode: 0o644, data: []byte(passwd)}, file{path: "/etc/group", mode: 0o644, data: []byte(group)})
		img = mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	}
	tb, err := layerTar(files, created)
	if err != nil {
		return nil, fmt.Errorf("%s %s: layer: %w", c.Name, p, err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(tb)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestCompression), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("%s %s: layer: %w", c.Name, p, err)
	}
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, MediaType: types.OCILayer,
		History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "skein images: " + BinaryPath(c)}})
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", c.Name, p, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("%s %s: config: %w", c.Name, p, err)
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: created}
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Arch, p.Variant
	cf.Config.User = fmt.Sprintf("%d:%d", UID, GID)
	cf.Config.Entrypoint = []string{BinaryPath(c)}
	cf.Config.Cmd = nil
	cf.Config.WorkingDir = "/"
	if len(cf.Config.Env) == 0 {
		cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	}
	cf.Config.Labels = m.annotations(c)
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, fmt.Errorf("%s %s: config: %w", c.Name, p, err)
	}
	out, ok := mutate.Annotations(img, m.annotations(c)).(v1.Image)
	if !ok {
		return nil, fmt.Errorf("%s %s: annotating the manifest gave no image", c.Name, p)
	}
	return out, nil
}

// Index builds c's multi-platform index from one binary per platform (in the order given);
// base, if set, gives the base image of a platform.
func Index(c Component, platforms []Platform, binaries map[Platform][]byte, m Meta, base func(Platform) (v1.Image, error)) (v1.ImageIndex, error) {
	var adds []mutate.IndexAddendum
	for _, p := range platforms {
		bin, ok := binaries[p]
		if !ok {
			return nil, fmt.Errorf("%s: no binary for %s", c.Name, p)
		}
		var b v1.Image
		if base != nil {
			var err error
			if b, err = base(p); err != nil {
				return nil, fmt.Errorf("%s %s: base image: %w", c.Name, p, err)
			}
		}
		img, err := Image(c, p, bin, m, b)
		if err != nil {
			return nil, err
		}
		plat := v1.Platform{OS: p.OS, Architecture: p.Arch, Variant: p.Variant}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &plat}})
	}
	idx := mutate.IndexMediaType(mutate.AppendManifests(empty.Index, adds...), types.OCIImageIndex)
	out, ok := mutate.Annotations(idx, m.annotations(c)).(v1.ImageIndex)
	if !ok {
		return nil, fmt.Errorf("%s: annotating the index gave no index", c.Name)
	}
	return out, nil
}
