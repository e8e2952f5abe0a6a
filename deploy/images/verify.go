package images

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// machines are the ELF machines of the architectures images are built for.
var machines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "arm": elf.EM_ARM,
	"386": elf.EM_386, "ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390, "riscv64": elf.EM_RISCV}

// Verify checks what every image of c must be, for the tests and for `make images` before it
// writes anything: one manifest per platform, in order; each runs as a numeric non-root user,
// its entrypoint is a file of its layers and a static ELF executable of its architecture;
// manifests, configs and the index carry m's version and revision.
func Verify(idx v1.ImageIndex, c Component, platforms []Platform, m Meta) error {
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	if err := checkAnnotations("index", im.Annotations, m); err != nil {
		return err
	}
	if len(im.Manifests) != len(platforms) {
		return fmt.Errorf("%s: %d manifests, want one per platform %v", c.Name, len(im.Manifests), platforms)
	}
	for i, d := range im.Manifests {
		p := platforms[i]
		if d.Platform == nil || d.Platform.OS != p.OS || d.Platform.Architecture != p.Arch || d.Platform.Variant != p.Variant {
			return fmt.Errorf("%s: manifest %d is for %v, want %s", c.Name, i, d.Platform, p)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return fmt.Errorf("%s %s: %w", c.Name, p, err)
		}
		if err := verifyImage(img, c, p, m); err != nil {
			return fmt.Errorf("%s %s: %w", c.Name, p, err)
		}
	}
	return nil
}

func verifyImage(img v1.Image, c Component, p Platform, m Meta) error {
	man, err := img.Manifest()
	if err != nil {
		return err
	}
	if err := checkAnnotations("manifest", man.Annotations, m); err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	if cf.OS != p.OS || cf.Architecture != p.Arch {
		return fmt.Errorf("config says %s/%s", cf.OS, cf.Architecture)
	}
	if err := checkAnnotations("config labels", cf.Config.Labels, m); err != nil {
		return err
	}
	uid, gid, ok := strings.Cut(cf.Config.User, ":")
	u, err1 := strconv.Atoi(uid)
	g, err2 := strconv.Atoi(gid)
	if !ok || err1 != nil || err2 != nil || u <= 0 || g < 0 {
		return fmt.Errorf("user %q: want a numeric non-root uid:gid", cf.Config.User)
	}
	if len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != BinaryPath(c) {
		return fmt.Errorf("entrypoint %q, want [%s]", cf.Config.Entrypoint, BinaryPath(c))
	}
	bin, mode, err := fileOf(img, BinaryPath(c))
	if err != nil {
		return err
	}
	if mode&0o111 == 0 {
		return fmt.Errorf("%s is not executable (mode %o)", BinaryPath(c), mode)
	}
	return checkStaticELF(bin, p)
}

func checkAnnotations(what string, a map[string]string, m Meta) error {
	if a["org.opencontainers.image.version"] != m.Version || a["org.opencontainers.image.revision"] != m.Revision {
		return fmt.Errorf("%s: version %q revision %q, want %q %q", what,
			a["org.opencontainers.image.version"], a["org.opencontainers.image.revision"], m.Version, m.Revision)
	}
	return nil
}

// fileOf reads a regular file out of an image's flattened filesystem.
func fileOf(img v1.Image, name string) ([]byte, int64, error) {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	want := strings.TrimPrefix(name, "/")
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, 0, fmt.Errorf("%s is not in the image", name)
		}
		if err != nil {
			return nil, 0, err
		}
		if strings.TrimPrefix(h.Name, "./") != want {
			continue
		}
		if h.Typeflag != tar.TypeReg {
			return nil, 0, fmt.Errorf("%s is not a regular file", name)
		}
		b, err := io.ReadAll(tr)
		return b, h.Mode, err
	}
}

// checkStaticELF: an executable for p's architecture, with no interpreter and no shared
// libraries (it runs on an empty image).
func checkStaticELF(b []byte, p Platform) error {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("entrypoint is not an ELF file: %w", err)
	}
	defer f.Close()
	if want, ok := machines[p.Arch]; !ok || f.Machine != want {
		return fmt.Errorf("entrypoint is for %v, want %s", f.Machine, p.Arch)
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("entrypoint is an ELF %v, not an executable", f.Type)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return errors.New("entrypoint is dynamically linked (it has an interpreter)")
		}
	}
	if libs, err := f.ImportedLibraries(); err == nil && len(libs) > 0 {
		return fmt.Errorf("entrypoint needs shared libraries %v", libs)
	}
	return nil
}
