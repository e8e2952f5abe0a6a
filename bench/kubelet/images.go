package kubelet

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// fromRegistry reports whether image is a reference into the lab's registry (Options.Registry).
func (k *Kubelet) fromRegistry(image string) bool {
	return k.o.Registry != "" && strings.HasPrefix(image, k.o.Registry+"/")
}

// pull fetches image from the lab's registry for this machine's architecture (the registry
// client checks every blob against its digest, and a reference with a digest pins the
// manifest), unpacks its filesystem once per image digest under the state dir, and returns
// the path of its entrypoint there and the image's ID (repository@digest). The entrypoint is
// a static binary: it runs from there, in the pod's namespaces, as the lab's pods do.
func (k *Kubelet) pull(image string) (entrypoint, id string, err error) {
	ref, err := name.ParseReference(image, name.Insecure)
	if err != nil {
		return "", "", fmt.Errorf("image %q: %w", image, err)
	}
	img, err := remote.Image(ref, remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}))
	if err != nil {
		return "", "", fmt.Errorf("pull %s: %w", image, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return "", "", fmt.Errorf("pull %s: %w", image, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return "", "", fmt.Errorf("pull %s: config: %w", image, err)
	}
	if len(cf.Config.Entrypoint) == 0 {
		return "", "", fmt.Errorf("image %s has no entrypoint", image)
	}
	k.pullMu.Lock()
	defer k.pullMu.Unlock()
	root := filepath.Join(k.o.StateDir, "images", digest.Hex, "rootfs")
	if _, err := os.Stat(root + ".done"); err != nil {
		_ = os.RemoveAll(root)
		if err := unpack(img, root); err != nil {
			return "", "", fmt.Errorf("unpack %s: %w", image, err)
		}
		if err := os.WriteFile(root+".done", nil, 0o644); err != nil {
			return "", "", err
		}
		k.log.Info("pulled", "image", image, "digest", digest.String())
	}
	return filepath.Join(root, filepath.Clean("/"+cf.Config.Entrypoint[0])), ref.Context().Name() + "@" + digest.String(), nil
}

// inRoot is where an image's file named name goes under root: the name is cleaned as an
// absolute path first, so "../x" is root/x.
func inRoot(root, name string) string { return filepath.Join(root, filepath.Clean("/"+name)) }

// unpack writes an image's flattened filesystem (directories and regular files only) under
// root. Every name is cleaned as an absolute path first, so "../x" lands at root/x: nothing is
// written outside root.
func unpack(img v1.Image, root string) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		dst := inRoot(root, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o755)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}
