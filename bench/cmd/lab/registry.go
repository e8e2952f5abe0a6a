package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/skein-net/skein/bench/lab"
	"github.com/skein-net/skein/deploy/images"
)

// runRegistry serves an OCI registry (in memory) in the lab, loaded with the images of an OCI
// layout: each index named NAME:TAG in the layout becomes <listen>/skein-net/NAME:TAG.
func runRegistry(args []string) error {
	fs := flag.NewFlagSet("lab registry", flag.ExitOnError)
	listen := fs.String("listen", "", "address to serve on, such as 10.255.0.1:5000")
	var dirs []string
	fs.Func("layout", "OCI image layout whose named indexes to serve (repeatable)", func(v string) error { dirs = append(dirs, v); return nil })
	ready := fs.String("ready", "", "file to write once the images are served")
	_ = fs.Parse(args)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0)))}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Fatal(err)
		}
	}()
	for _, dir := range dirs {
		if err := load(*listen, dir); err != nil {
			return err
		}
	}
	if *ready != "" {
		if err := os.WriteFile(*ready, []byte(*listen+"\n"), 0o644); err != nil {
			return err
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	return srv.Close()
}

// load pushes every named index of the layout at dir into the registry at addr.
func load(addr, dir string) error {
	p, err := layout.FromPath(dir)
	if err != nil {
		return fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		return err
	}
	im, err := top.IndexManifest()
	if err != nil {
		return err
	}
	for _, d := range im.Manifests {
		ref := d.Annotations[images.RefName]
		if ref == "" {
			continue
		}
		idx, err := top.ImageIndex(d.Digest)
		if err != nil {
			return fmt.Errorf("%s: %w", ref, err)
		}
		r, err := name.ParseReference(addr+"/skein-net/"+ref, name.Insecure)
		if err != nil {
			return err
		}
		if err := remote.WriteIndex(r, idx); err != nil {
			return fmt.Errorf("load %s: %w", r, err)
		}
		fmt.Printf("serving %s@%s\n", r, d.Digest)
	}
	return nil
}

// push loads an OCI layout into a running lab's registry, from the workstation namespace (the
// machine's own namespace has no route to the lab).
func push(args []string) error {
	fs, prefix := flags("push")
	dir := fs.String("layout", "bin/images", "OCI image layout whose named indexes to push")
	parse(fs, args, prefix)
	l, err := lab.Load(lab.DefaultStateDir(*prefix))
	if err != nil {
		return err
	}
	if l.Registry == "" {
		return fmt.Errorf("the lab %q serves no registry (was it started by an older lab binary?): lab down, then lab up", *prefix)
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := l.Command(context.Background(), 0, self, "push-here", "--layout", abs, "--to", l.Registry)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

// pushHere pushes a layout to a registry reachable from this namespace.
func pushHere(args []string) error {
	fs := flag.NewFlagSet("lab push-here", flag.ExitOnError)
	dir := fs.String("layout", "", "OCI image layout")
	to := fs.String("to", "", "registry host:port")
	_ = fs.Parse(args)
	return load(*to, *dir)
}
