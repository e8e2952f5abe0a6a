// Command k8s-binaries builds etcd, the Kubernetes control-plane binaries, helm, the lab nodes' stack and the lab's CoreDNS from the Go
// module proxy into skein's cache (see package internal/k8sbin) and prints the directory holding
// the Kubernetes binaries.
//
//	go run ./bench/cmd/k8s-binaries          # build if needed, print the bin directory
//	go run ./bench/cmd/k8s-binaries -check   # exit 1 unless a complete build is cached
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/skein-net/skein/internal/k8sbin"
)

func main() {
	check := flag.Bool("check", false, "only report whether the binaries are built; never build")
	quiet := flag.Bool("q", false, "do not print build output, only the bin directory")
	helmPath := flag.Bool("helm", false, "build helm into the cache if it is not there (not the Kubernetes binaries), print its path and exit")
	nodeStack := flag.Bool("node-stack", false, "build the lab nodes' stack (kubelet, containerd, runc, CNI plugins, flanneld) into $SKEIN_CACHE/nodestack if it is not there, print its bin directory and exit; needs gcc and libseccomp-dev")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: k8s-binaries [-check] [-q] [-helm] [-node-stack]\n\n"+
			"Builds etcd %s and Kubernetes %s (%v) into $SKEIN_CACHE/k8s, helm %s into\n"+
			"$SKEIN_CACHE/helm and the lab nodes' stack (%v: kubelet, containerd %s, runc %s, CNI\n"+
			"plugins %s, flannel %s) into $SKEIN_CACHE/nodestack and CoreDNS %s (the lab's cluster DNS) into\n"+
			"$SKEIN_CACHE/coredns (default ~/.cache/skein), from the Go\n"+
			"module proxy, and prints the Kubernetes bin directory. A second run with a complete\n"+
			"cache returns in seconds. runc needs gcc and libseccomp-dev (.ci/install-deps).\n\n",
			k8sbin.EtcdVersion, k8sbin.KubernetesVersion, k8sbin.Binaries, k8sbin.HelmVersion, k8sbin.NodeStackBinaries,
			k8sbin.ContainerdVersion, k8sbin.RuncVersion, k8sbin.CNIPluginsVersion, k8sbin.FlannelVersion, k8sbin.CoreDNSVersion)
		flag.PrintDefaults()
	}
	flag.Parse()

	if *helmPath {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		helm, err := k8sbin.EnsureHelm(ctx, io.Discard)
		if err != nil {
			fmt.Fprintf(os.Stderr, "k8s-binaries: %v\n", err)
			os.Exit(1)
		}
		fmt.Println(helm)
		return
	}
	if *nodeStack {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		var log io.Writer = os.Stderr
		if *quiet {
			log = io.Discard
		}
		bin, err := k8sbin.EnsureNodeStack(ctx, log)
		if err != nil {
			fmt.Fprintf(os.Stderr, "k8s-binaries: %v\n", err)
			os.Exit(1)
		}
		fmt.Println(bin)
		return
	}
	if *check {
		bin, ok := k8sbin.Ready()
		helm, helmOK := k8sbin.HelmReady()
		stack, stackOK := k8sbin.NodeStackReady()
		coredns, corednsOK := k8sbin.CoreDNSReady()
		if !ok {
			fmt.Fprintf(os.Stderr, "k8s binaries are not built in %s; run 'make k8s-binaries'\n", bin)
		}
		if !helmOK {
			fmt.Fprintf(os.Stderr, "helm is not built at %s; run 'make k8s-binaries'\n", helm)
		}
		if !stackOK {
			fmt.Fprintf(os.Stderr, "the node stack is not built in %s; run 'make k8s-binaries'\n", stack)
		}
		if !corednsOK {
			fmt.Fprintf(os.Stderr, "CoreDNS (the lab's cluster DNS) is not built at %s; run 'make k8s-binaries'\n", coredns)
		}
		if !ok || !helmOK || !stackOK || !corednsOK {
			os.Exit(1)
		}
		fmt.Println(bin)
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var log io.Writer = os.Stderr
	if *quiet {
		log = io.Discard
	}
	bin, err := k8sbin.Ensure(ctx, log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "k8s-binaries: %v\n", err)
		os.Exit(1)
	}
	if _, err := k8sbin.EnsureHelm(ctx, log); err != nil {
		fmt.Fprintf(os.Stderr, "k8s-binaries: %v\n", err)
		os.Exit(1)
	}
	if _, err := k8sbin.EnsureNodeStack(ctx, log); err != nil {
		fmt.Fprintf(os.Stderr, "k8s-binaries: %v\n", err)
		os.Exit(1)
	}
	if _, err := k8sbin.EnsureCoreDNS(ctx, log); err != nil {
		fmt.Fprintf(os.Stderr, "k8s-binaries: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(bin)
}
