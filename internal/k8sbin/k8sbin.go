// Package k8sbin builds the Kubernetes control-plane binaries (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, kube-proxy, kubectl) from the Go module proxy into a
// versioned cache directory, and tells tests and the lab where they are.
//
// There is no container engine and no release download here, only the module proxy, so the
// binaries are compiled from source: a throw-away wrapper module requires k8s.io/kubernetes and
// pins every staging module (k8s.io/api, k8s.io/client-go, ...) to the matching v0.X.Y with
// replace lines, because k8s.io/kubernetes' own go.mod points them at ./staging, which a module
// consumer cannot see. etcd is built from a tiny main over go.etcd.io/etcd/server/v3/etcdmain in a
// second wrapper module, so that its dependency graph does not have to agree with Kubernetes'.
//
// Building is idempotent: a complete build writes a stamp naming the versions and the Go
// toolchain, and a later call with the same stamp returns at once.
package k8sbin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

const (
	// KubernetesVersion is the k8s.io/kubernetes release the control plane is built from. Keep
	// it on the same minor as the k8s.io/client-go in go.mod.
	KubernetesVersion = "v1.37.1"
	// EtcdVersion is the go.etcd.io/etcd/server/v3 release etcd is built from.
	EtcdVersion = "v3.7.3"
)

// Binaries lists the programs Ensure builds, in the order they are reported.
var Binaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "kubectl"}

// kubeCommands are the k8s.io/kubernetes main packages built into the cache.
var kubeCommands = []string{
	"k8s.io/kubernetes/cmd/kube-apiserver",
	"k8s.io/kubernetes/cmd/kube-controller-manager",
	"k8s.io/kubernetes/cmd/kube-scheduler",
	"k8s.io/kubernetes/cmd/kube-proxy",
	"k8s.io/kubernetes/cmd/kubectl",
}

// CacheRoot is where skein keeps built tools: $SKEIN_CACHE if set, else the user cache
// directory's "skein" folder (~/.cache/skein).
func CacheRoot() (string, error) {
	if d := os.Getenv("SKEIN_CACHE"); d != "" {
		return filepath.Abs(d)
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find a cache directory (set SKEIN_CACHE): %w", err)
	}
	return filepath.Join(d, "skein"), nil
}

// Dir is the versioned directory for this build of the control plane, under CacheRoot.
func Dir() (string, error) {
	root, err := CacheRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "k8s", fmt.Sprintf("kubernetes-%s_etcd-%s_%s-%s", KubernetesVersion, EtcdVersion, runtime.GOOS, runtime.GOARCH)), nil
}

// BinDir is the directory holding the built binaries. It exists only after Ensure succeeded.
func BinDir() (string, error) {
	d, err := Dir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "bin"), nil
}

// kubeEntry is the cache entry of the Kubernetes and etcd build.
func kubeEntry() (entry, error) {
	d, err := Dir()
	return entry{name: "k8s binaries", dir: d, stamp: stamp, binaries: Binaries}, err
}

// Ready reports whether a complete build for these versions and this Go toolchain is in the
// cache, and returns its bin directory. It never builds.
func Ready() (string, bool) {
	e, err := kubeEntry()
	if err != nil {
		return "", false
	}
	return e.bin(), e.ready()
}

// stamp describes a build; a cache entry is reused only when its stamp is identical.
func stamp() ([]byte, error) {
	return stampOf(map[string]any{"kubernetes": KubernetesVersion, "etcd": EtcdVersion, "binaries": Binaries})
}

// stampOf is the JSON of fields plus the Go toolchain's version ("go").
func stampOf(fields map[string]any) ([]byte, error) {
	goVersion, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		return nil, fmt.Errorf("run 'go env GOVERSION' (is Go on PATH?): %w", err)
	}
	fields["go"] = strings.TrimSpace(string(goVersion))
	return json.Marshal(fields)
}

// Ensure builds the binaries into BinDir unless a complete build is already there, and returns
// BinDir. Build output goes to log. A failed or interrupted build leaves no stamp, so the next
// call starts again (Go's own build cache keeps the finished work).
func Ensure(ctx context.Context, log io.Writer) (string, error) {
	e, err := kubeEntry()
	if err != nil {
		return "", err
	}
	if e.ready() {
		fmt.Fprintf(log, "k8s binaries: up to date in %s\n", e.bin())
		return e.bin(), nil
	}
	err = e.ensure(func(bin string) error {
		if err := buildKube(ctx, log, filepath.Join(e.dir, "src", "kubernetes"), bin, kubeCommands); err != nil {
			return err
		}
		return buildEtcd(ctx, log, filepath.Join(e.dir, "src", "etcd"), bin)
	})
	if err != nil {
		return "", err
	}
	fmt.Fprintf(log, "k8s binaries: built in %s\n", e.bin())
	return e.bin(), nil
}

// buildKube builds the k8s.io/kubernetes main packages commands into bin.
func buildKube(ctx context.Context, log io.Writer, src, bin string, commands []string) error {
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	// Learn the staging modules from k8s.io/kubernetes' own go.mod: each "X => ./staging/src/X"
	// becomes "X => X v0.<minor>.<patch>".
	kubeMod, err := downloadGoMod(ctx, src, "k8s.io/kubernetes@"+KubernetesVersion)
	if err != nil {
		return err
	}
	staging, err := stagingModules(kubeMod)
	if err != nil {
		return err
	}
	stagingVersion := "v0" + strings.TrimPrefix(KubernetesVersion, "v1")

	var gomod strings.Builder
	fmt.Fprintf(&gomod, "// Generated by skein's internal/k8sbin; throw-away wrapper to build Kubernetes %s.\n", KubernetesVersion)
	gomod.WriteString("module skein.local/kubernetes-binaries\n\ngo 1.26.0\n\n")
	fmt.Fprintf(&gomod, "require k8s.io/kubernetes %s\n\n", KubernetesVersion)
	for _, c := range commands {
		fmt.Fprintf(&gomod, "tool %s\n", c)
	}
	gomod.WriteString("\nreplace (\n")
	for _, m := range staging {
		fmt.Fprintf(&gomod, "\t%s => %s %s\n", m, m, stagingVersion)
	}
	gomod.WriteString(")\n")
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte(gomod.String()), 0o644); err != nil {
		return err
	}
	if err := goCmd(ctx, log, src, "mod", "tidy"); err != nil {
		return fmt.Errorf("resolve Kubernetes %s dependencies: %w", KubernetesVersion, err)
	}
	ldflags := strings.Join([]string{
		"-s", "-w",
		"-X", "k8s.io/component-base/version.gitVersion=" + KubernetesVersion,
		"-X", "k8s.io/component-base/version.gitMajor=1",
		"-X", "k8s.io/component-base/version.gitMinor=" + strings.Split(KubernetesVersion, ".")[1],
		"-X", "k8s.io/component-base/version.gitTreeState=clean",
		"-X", "k8s.io/client-go/pkg/version.gitVersion=" + KubernetesVersion,
	}, " ")
	args := append([]string{"build", "-trimpath", "-ldflags", ldflags, "-o", bin + "/"}, commands...)
	if err := goCmd(ctx, log, src, args...); err != nil {
		return fmt.Errorf("build Kubernetes %s: %w", KubernetesVersion, err)
	}
	return nil
}

func buildEtcd(ctx context.Context, log io.Writer, src, bin string) error {
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	gomod := fmt.Sprintf("// Generated by skein's internal/k8sbin; throw-away wrapper to build etcd %s.\n"+
		"module skein.local/etcd\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n", EtcdVersion, EtcdVersion)
	main := "// Generated by skein's internal/k8sbin.\npackage main\n\nimport (\n\t\"os\"\n\n\t\"go.etcd.io/etcd/server/v3/etcdmain\"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n"
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte(gomod), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(main), 0o644); err != nil {
		return err
	}
	if err := goCmd(ctx, log, src, "mod", "tidy"); err != nil {
		return fmt.Errorf("resolve etcd %s dependencies: %w", EtcdVersion, err)
	}
	if err := goCmd(ctx, log, src, "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(bin, "etcd"), "."); err != nil {
		return fmt.Errorf("build etcd %s: %w", EtcdVersion, err)
	}
	return nil
}

// downloadGoMod fetches a module's go.mod through the module proxy and returns its text.
func downloadGoMod(ctx context.Context, dir, modAtVersion string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", modAtVersion)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("go mod download %s: %w: %s", modAtVersion, err, ee.Stderr)
		}
		return nil, fmt.Errorf("go mod download %s: %w", modAtVersion, err)
	}
	var info struct{ GoMod, Error string }
	if err := json.Unmarshal(out, &info); err != nil {
		return nil, fmt.Errorf("go mod download %s: %w", modAtVersion, err)
	}
	if info.Error != "" {
		return nil, fmt.Errorf("go mod download %s: %s", modAtVersion, info.Error)
	}
	return os.ReadFile(info.GoMod)
}

// stagingModules returns the module paths that a go.mod replaces with ./staging/src/... paths.
func stagingModules(gomod []byte) ([]string, error) {
	var mods []string
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "replace "))
		if len(f) == 3 && f[1] == "=>" && strings.HasPrefix(f[2], "./staging/src/") {
			mods = append(mods, f[0])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(mods) == 0 {
		return nil, errors.New("k8s.io/kubernetes go.mod names no staging modules; has its layout changed?")
	}
	return mods, nil
}

func goCmd(ctx context.Context, log io.Writer, dir string, args ...string) error {
	return goCmdEnv(ctx, log, dir, nil, args...)
}

// goCmdEnv is goCmd with extra environment variables (CGO_ENABLED, CGO_CFLAGS, ...).
func goCmdEnv(ctx context.Context, log io.Writer, dir string, env []string, args ...string) error {
	fmt.Fprintf(log, "k8s binaries: (in %s) %s go %s\n", dir, strings.Join(env, " "), strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	// The wrapper modules live outside any workspace and must resolve their own dependencies.
	cmd.Env = append(append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod"), env...)
	cmd.Stdout = log
	cmd.Stderr = log
	return cmd.Run()
}
