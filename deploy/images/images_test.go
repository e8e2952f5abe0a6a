package images_test

import (
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/skein-net/skein/deploy/images"
)

var (
	meta = images.Meta{Version: "v0.2.0-test", Revision: "0123456789abcdef0123456789abcdef01234567",
		Source: "https://github.com/skein-net/skein", Created: time.Unix(1763900000, 0)}
	component = images.Component{Name: "skein-hello", Package: "hello", Description: "a test image"}
)

// binaries cross-compiles a small static program for every default platform, into dir.
func binaries(t *testing.T, dir string) map[images.Platform][]byte {
	t.Helper()
	src := filepath.Join(dir, "hello.go")
	if err := os.WriteFile(src, []byte("package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello\") }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := map[images.Platform][]byte{}
	for _, p := range images.DefaultPlatforms {
		bin := filepath.Join(dir, "hello-"+p.Arch)
		if err := images.Binary(src, p, "-s -w", bin); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		out[p] = b
	}
	return out
}

// TestIndex: an index for every platform passes Verify (a non-root numeric user, the
// entrypoint a static ELF of each architecture in the layers, version and revision in the
// annotations), and two builds from binaries compiled twice give one digest.
func TestIndex(t *testing.T) {
	idx1, err := images.Index(component, images.DefaultPlatforms, binaries(t, t.TempDir()), meta, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := images.Verify(idx1, component, images.DefaultPlatforms, meta); err != nil {
		t.Fatal(err)
	}
	idx2, err := images.Index(component, images.DefaultPlatforms, binaries(t, t.TempDir()), meta, nil)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := idx1.Digest()
	d2, _ := idx2.Digest()
	if d1 != d2 {
		t.Errorf("two builds: %s and %s, want one digest", d1, d2)
	}
	im, err := idx1.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if string(im.MediaType) != "application/vnd.oci.image.index.v1+json" {
		t.Errorf("index media type %s, want OCI", im.MediaType)
	}
	for _, d := range im.Manifests {
		img, _ := idx1.Image(d.Digest)
		man, _ := img.Manifest()
		if string(man.MediaType) != "application/vnd.oci.image.manifest.v1+json" || string(man.Layers[0].MediaType) != "application/vnd.oci.image.layer.v1.tar+gzip" {
			t.Errorf("%v: manifest %s, layer %s, want OCI media types", d.Platform, man.MediaType, man.Layers[0].MediaType)
		}
		cf, _ := img.ConfigFile()
		if cf.Config.User != "65534:65534" || !cf.Created.Time.Equal(meta.Created) {
			t.Errorf("%v: user %q created %v", d.Platform, cf.Config.User, cf.Created)
		}
	}
	other := meta
	other.Revision = "fedcba9876543210fedcba9876543210fedcba98"
	if idx3, err := images.Index(component, images.DefaultPlatforms, binaries(t, t.TempDir()), other, nil); err != nil {
		t.Fatal(err)
	} else if d3, _ := idx3.Digest(); d3 == d1 {
		t.Error("another revision gave the same digest")
	}
}

// TestVerifyRejects: what Verify must catch.
func TestVerifyRejects(t *testing.T) {
	bins := binaries(t, t.TempDir())
	good, err := images.Index(component, images.DefaultPlatforms, bins, meta, nil)
	if err != nil {
		t.Fatal(err)
	}
	// withConfig is good with the first platform's config edited.
	withConfig := func(edit func(*v1.ConfigFile)) func() (v1.ImageIndex, error) {
		return func() (v1.ImageIndex, error) {
			im, _ := good.IndexManifest()
			var adds []mutate.IndexAddendum
			for i, d := range im.Manifests {
				img, err := good.Image(d.Digest)
				if err != nil {
					return nil, err
				}
				if i == 0 {
					cf, _ := img.ConfigFile()
					cf = cf.DeepCopy()
					edit(cf)
					if img, err = mutate.ConfigFile(img, cf); err != nil {
						return nil, err
					}
				}
				adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: d.Platform}})
			}
			return mutate.Annotations(mutate.AppendManifests(empty.Index, adds...), im.Annotations).(v1.ImageIndex), nil
		}
	}
	swapped := map[images.Platform][]byte{images.DefaultPlatforms[0]: bins[images.DefaultPlatforms[1]], images.DefaultPlatforms[1]: bins[images.DefaultPlatforms[0]]}
	cases := []struct {
		name string
		idx  func() (v1.ImageIndex, error)
		says string
	}{
		{"root", withConfig(func(cf *v1.ConfigFile) { cf.Config.User = "0:0" }), `user "0:0"`},
		{"a user name", withConfig(func(cf *v1.ConfigFile) { cf.Config.User = "nobody" }), `user "nobody"`},
		{"no user", withConfig(func(cf *v1.ConfigFile) { cf.Config.User = "" }), `user ""`},
		{"another entrypoint", withConfig(func(cf *v1.ConfigFile) { cf.Config.Entrypoint = []string{"/bin/sh"} }), "entrypoint [\"/bin/sh\"]"},
		{"no revision label", withConfig(func(cf *v1.ConfigFile) { delete(cf.Config.Labels, "org.opencontainers.image.revision") }), "config labels"},
		{"binaries of the other architecture", func() (v1.ImageIndex, error) {
			return images.Index(component, images.DefaultPlatforms, swapped, meta, nil)
		}, "entrypoint is for EM_AARCH64, want amd64"},
		{"not an ELF", func() (v1.ImageIndex, error) {
			return images.Index(component, images.DefaultPlatforms, map[images.Platform][]byte{images.DefaultPlatforms[0]: []byte("#!/bin/sh\n"), images.DefaultPlatforms[1]: []byte("#!/bin/sh\n")}, meta, nil)
		}, "not an ELF file"},
	}
	for _, tc := range cases {
		idx, err := tc.idx()
		if err != nil {
			t.Fatal(err)
		}
		if err := images.Verify(idx, component, images.DefaultPlatforms, meta); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.says)
		}
	}
	other := meta
	other.Version = "v9.9.9"
	if err := images.Verify(good, component, images.DefaultPlatforms, other); err == nil || !strings.Contains(err.Error(), `version "v0.2.0-test"`) {
		t.Errorf("another version: %v", err)
	}
	if err := images.Verify(good, component, images.DefaultPlatforms[:1], meta); err == nil || !strings.Contains(err.Error(), "2 manifests") {
		t.Errorf("a platform too many: %v", err)
	}
}

// TestLayoutAndPush: the index written to an OCI layout reads back with its digest, writing
// it again under the same name keeps one entry, and a push to a registry (in process, on
// loopback) pulls back with the same digest.
func TestLayoutAndPush(t *testing.T) {
	idx, err := images.Index(component, images.DefaultPlatforms, binaries(t, t.TempDir()), meta, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := idx.Digest()
	dir := t.TempDir()
	for range 2 {
		if err := images.WriteLayout(dir, "skein-hello:v0.2.0-test", idx); err != nil {
			t.Fatal(err)
		}
	}
	back, err := images.ReadLayout(dir, "skein-hello:v0.2.0-test")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := back.Digest(); got != want {
		t.Errorf("layout: %s, want %s", got, want)
	}
	index, _ := os.ReadFile(filepath.Join(dir, "index.json"))
	if n := strings.Count(string(index), "skein-hello:v0.2.0-test"); n != 1 {
		t.Errorf("index.json names the image %d times:\n%s", n, index)
	}

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/skein-net/skein-hello:v0.2.0-test"
	pushed, err := images.Push(ref, idx, true)
	if err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Index(r)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := pulled.Digest(); got != want || pushed != want {
		t.Errorf("registry: pushed %s, pulled %s, want %s", pushed, got, want)
	}
	if err := images.Verify(pulled, component, images.DefaultPlatforms, meta); err != nil {
		t.Errorf("the pulled index: %v", err)
	}
}
