// Command images builds skein's OCI images without a container engine (make images): one
// multi-platform index per component, written to an OCI image layout and, with --push, to a
// registry. See deploy/images.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/skein-net/skein/deploy/images"
)

const buildinfo = "github.com/skein-net/skein/control/buildinfo"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "images: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("images", flag.ExitOnError)
	out := fs.String("out", "bin/images", "OCI image layout to write the indexes to, each named <component>:<version>")
	comps := fs.String("components", "", "components to build, comma-separated (default: all of skein-controller, skein-agent, skein-gateway, skein-probe)")
	plats := fs.String("platforms", "linux/amd64,linux/arm64", "platforms, comma-separated")
	version := fs.String("version", "", "version stamped into the binaries and the images, and their tag (default: the VERSION file)")
	revision := fs.String("revision", "", "commit stamped into the binaries and images (default: git rev-parse HEAD)")
	source := fs.String("source", "https://github.com/skein-net/skein", "org.opencontainers.image.source")
	base := fs.String("base", os.Getenv("BASE_IMAGE"), "base image (such as gcr.io/distroless/static:nonroot), pulled for each platform; default $BASE_IMAGE, empty: none (the layer brings /etc/passwd and /etc/group)")
	push := fs.Bool("push", false, "push every index to --registry")
	registry := fs.String("registry", "ghcr.io/skein-net", "registry and path to push to: <registry>/<component>:<version>")
	insecure := fs.Bool("insecure", false, "plain HTTP to the registry (a lab's)")
	twice := fs.Bool("check-reproducible", false, "build everything twice, from binaries compiled twice, and fail unless the digests agree")
	_ = fs.Parse(args)
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (a flag's value missing before them?)", fs.Args())
	}
	if *push {
		if err := checkRegistry(*registry, *insecure); err != nil {
			return err
		}
	}

	m, err := meta(*version, *revision, *source)
	if err != nil {
		return err
	}
	// The version is an image tag and goes into -ldflags: nothing else may pass.
	if !tagPattern.MatchString(m.Version) {
		return fmt.Errorf("version %q is not an image tag (letters, digits, '_', '.', '-'; at most 128, not starting with '.' or '-')", m.Version)
	}
	if !revisionPattern.MatchString(m.Revision) {
		return fmt.Errorf("revision %q is not a commit id (hex)", m.Revision)
	}
	platforms, err := parsePlatforms(*plats)
	if err != nil {
		return err
	}
	components, err := parseComponents(*comps)
	if err != nil {
		return err
	}
	var baseFor func(images.Platform) (v1.Image, error)
	if *base != "" {
		ref, err := name.ParseReference(*base)
		if err != nil {
			return fmt.Errorf("--base %q: %w", *base, err)
		}
		baseFor = func(p images.Platform) (v1.Image, error) {
			return remote.Image(ref, remote.WithAuthFromKeychain(authn.DefaultKeychain),
				remote.WithPlatform(v1.Platform{OS: p.OS, Architecture: p.Arch, Variant: p.Variant}))
		}
	}
	work, err := os.MkdirTemp("", "skein-images-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	ldflags := fmt.Sprintf("-s -w -X %s.Version=%s -X %s.Commit=%s", buildinfo, m.Version, buildinfo, m.Revision)

	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tPLATFORM\tSIZE (compressed)\tDIGEST")
	start := time.Now()
	for _, c := range components {
		idx, err := build(c, platforms, m, baseFor, ldflags, filepath.Join(work, "1"))
		if err != nil {
			return err
		}
		if err := images.Verify(idx, c, platforms, m); err != nil {
			return fmt.Errorf("%s does not pass the checks: %w", c.Name, err)
		}
		digest, err := idx.Digest()
		if err != nil {
			return err
		}
		if *twice {
			again, err := build(c, platforms, m, baseFor, ldflags, filepath.Join(work, "2"))
			if err != nil {
				return err
			}
			if d, _ := again.Digest(); d != digest {
				return fmt.Errorf("%s is not reproducible: %s, then %s", c.Name, digest, d)
			}
		}
		tag := c.Name + ":" + m.Version
		if err := images.WriteLayout(*out, tag, idx); err != nil {
			return err
		}
		if err := report(tw, c, idx); err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\tindex\t\t%s\n", tag, digest)
		if *push {
			ref := strings.TrimSuffix(*registry, "/") + "/" + tag
			if _, err := images.Push(ref, idx, *insecure); err != nil {
				return err
			}
			fmt.Fprintf(tw, "%s\tpushed\t\t%s@%s\n", tag, ref, digest)
		}
	}
	fmt.Fprintf(tw, "\n%d images, %d platforms, in %s; OCI layout %s\n", len(components), len(platforms), time.Since(start).Round(100*time.Millisecond), *out)
	return tw.Flush()
}

// checkRegistry refuses a --registry that cannot name repositories, before anything is built.
func checkRegistry(registry string, insecure bool) error {
	switch {
	case registry == "":
		return fmt.Errorf("--push needs --registry (make images PUSH=1 REGISTRY=host[:port]/path)")
	case strings.Contains(registry, "://"):
		return fmt.Errorf("--registry %q: give host[:port]/path without a scheme (https is the default; --insecure, IMAGESFLAGS=--insecure with make, for plain HTTP)", registry)
	case registry != strings.ToLower(registry):
		return fmt.Errorf("--registry %q: repository paths are lower case", registry)
	}
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	if _, err := name.NewRepository(strings.TrimSuffix(registry, "/")+"/skein-controller", opts...); err != nil {
		return fmt.Errorf("--registry %q is not host[:port]/path: %v", registry, err)
	}
	return nil
}

// build compiles c for every platform into dir and builds its index.
func build(c images.Component, platforms []images.Platform, m images.Meta, base func(images.Platform) (v1.Image, error), ldflags, dir string) (v1.ImageIndex, error) {
	bins := map[images.Platform][]byte{}
	for _, p := range platforms {
		bin := filepath.Join(dir, c.Name+"-"+p.OS+"-"+p.Arch+p.Variant)
		if err := images.Binary(c.Package, p, ldflags, bin); err != nil {
			return nil, err
		}
		b, err := os.ReadFile(bin)
		if err != nil {
			return nil, err
		}
		bins[p] = b
	}
	return images.Index(c, platforms, bins, m, base)
}

// report prints each platform's image: its compressed size and digest.
func report(tw *tabwriter.Writer, c images.Component, idx v1.ImageIndex) error {
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return err
		}
		man, err := img.Manifest()
		if err != nil {
			return err
		}
		size := man.Config.Size
		for _, l := range man.Layers {
			size += l.Size
		}
		fmt.Fprintf(tw, "%s\t%s/%s\t%.1f MiB\t%s\n", c.Name, d.Platform.OS, d.Platform.Architecture, float64(size)/(1<<20), d.Digest)
	}
	return nil
}

// meta fills in the version (the VERSION file), the revision (git) and the creation time
// (SOURCE_DATE_EPOCH, else the commit's time).
func meta(version, revision, source string) (images.Meta, error) {
	m := images.Meta{Version: version, Revision: revision, Source: source}
	if m.Version == "" {
		b, err := os.ReadFile("VERSION")
		if err != nil {
			return m, fmt.Errorf("no --version and no VERSION file (run in the repository's root): %w", err)
		}
		m.Version = strings.TrimSpace(string(b))
	}
	if m.Revision == "" {
		b, err := exec.Command("git", "rev-parse", "HEAD").Output()
		if err != nil {
			return m, fmt.Errorf("no --revision and git rev-parse HEAD failed: %w", err)
		}
		m.Revision = strings.TrimSpace(string(b))
	}
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		b, err := exec.Command("git", "log", "-1", "--format=%ct", m.Revision).Output()
		if err != nil {
			return m, fmt.Errorf("no SOURCE_DATE_EPOCH and git log failed: %w", err)
		}
		epoch = strings.TrimSpace(string(b))
	}
	secs, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return m, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", epoch, err)
	}
	m.Created = time.Unix(secs, 0).UTC()
	return m, nil
}

var (
	tagPattern      = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
	revisionPattern = regexp.MustCompile(`^[0-9a-f]{4,64}$`)
)

func parsePlatforms(s string) ([]images.Platform, error) {
	var out []images.Platform
	for _, f := range strings.Split(s, ",") {
		p, err := images.ParsePlatform(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		if slices.Contains(out, p) {
			return nil, fmt.Errorf("platform %s listed twice", p)
		}
		out = append(out, p)
	}
	return out, nil
}

func parseComponents(s string) ([]images.Component, error) {
	if s == "" {
		return images.Components, nil
	}
	var out []images.Component
	for _, n := range strings.Split(s, ",") {
		c, ok := images.ComponentNamed(strings.TrimSpace(n))
		if !ok {
			return nil, fmt.Errorf("no component %q (skein-controller, skein-agent, skein-gateway, skein-probe)", n)
		}
		out = append(out, c)
	}
	return out, nil
}
