package images

import (
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/match"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// RefName is the annotation that names an index in an OCI layout ("skein-gateway:v0.2.0").
const RefName = "org.opencontainers.image.ref.name"

// WriteLayout puts idx into the OCI image layout at dir (made if missing) under ref,
// replacing what ref named before, and removes blobs nothing refers to any more.
func WriteLayout(dir, ref string, idx v1.ImageIndex) error {
	p, err := layout.FromPath(dir)
	if err != nil {
		if p, err = layout.Write(dir, empty.Index); err != nil {
			return fmt.Errorf("OCI layout %s: %w", dir, err)
		}
	}
	if err := p.ReplaceIndex(idx, match.Annotation(RefName, ref), layout.WithAnnotations(map[string]string{RefName: ref})); err != nil {
		return fmt.Errorf("OCI layout %s: %s: %w", dir, ref, err)
	}
	if _, err := p.GarbageCollect(); err != nil {
		return fmt.Errorf("OCI layout %s: garbage collect: %w", dir, err)
	}
	return nil
}

// ReadLayout returns the index ref names in the OCI image layout at dir.
func ReadLayout(dir, ref string) (v1.ImageIndex, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	for _, d := range im.Manifests {
		if d.Annotations[RefName] == ref {
			return top.ImageIndex(d.Digest)
		}
	}
	return nil, fmt.Errorf("OCI layout %s holds no %s", dir, ref)
}

// Push writes idx to the registry reference ref (such as ghcr.io/skein-net/skein-gateway:v0.2.0),
// with the credentials of the standard keychain (docker config, credential helpers), and
// returns its digest. insecure allows plain HTTP (a registry in the lab).
func Push(ref string, idx v1.ImageIndex, insecure bool) (v1.Hash, error) {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	r, err := name.ParseReference(ref, opts...)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("image reference %q: %w", ref, err)
	}
	if err := remote.WriteIndex(r, idx, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return v1.Hash{}, fmt.Errorf("push %s: %w", ref, err)
	}
	return idx.Digest()
}

// Binary cross-compiles pkg for p into out: static (no cgo), paths trimmed, with ldflags
// (the version stamp). Run in the module's root.
func Binary(pkg string, p Platform, ldflags, out string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Arch)
	if p.Arch == "arm" && p.Variant != "" {
		cmd.Env = append(cmd.Env, "GOARM="+strings.TrimPrefix(p.Variant, "v")) // linux/arm/v6 -> GOARM=6
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s for %s: %w\n%s", pkg, p, err, b)
	}
	return nil
}
