package main

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParsePrefixes(t *testing.T) {
	got, err := parsePrefixes("pod-cidrs", "10.244.0.0/16, 10.245.0.0/16, fd00:10:244::/56,")
	if err != nil || len(got) != 3 || got[1].String() != "10.245.0.0/16" || got[2].String() != "fd00:10:244::/56" {
		t.Errorf("parsePrefixes: %v, %v", got, err)
	}
	for in, want := range map[string]string{
		"10.244.1.0/16":       `--pod-cidrs: "10.244.1.0/16" has host bits set (did you mean 10.244.0.0/16?)`,
		"10.244.0.0":          `--pod-cidrs: "10.244.0.0" is not an IPv4 or IPv6 CIDR`,
		"::ffff:10.0.0.0/104": `--pod-cidrs: "::ffff:10.0.0.0/104" is not an IPv4 or IPv6 CIDR`,
		"fd00:10:244::1/56":   `--pod-cidrs: "fd00:10:244::1/56" has host bits set (did you mean fd00:10:244::/56?)`,
	} {
		if _, err := parsePrefixes("pod-cidrs", in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parsePrefixes(%q): %v, want %q", in, err, want)
		}
	}
}

func TestCheckPools(t *testing.T) {
	if err := checkPools(mustPrefixes(t, "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fd00::/8")); err != nil {
		t.Errorf("the default pools: %v", err)
	}
	for in, want := range map[string]string{
		"0.0.0.0/0":              "--pools: 0.0.0.0/0 overlaps 0.0.0.0/8 (this network)",
		"127.0.0.0/8":            "--pools: 127.0.0.0/8 overlaps 127.0.0.0/8 (loopback)",
		"10.0.0.0/8,224.0.0.0/3": "--pools: 224.0.0.0/3 overlaps 224.0.0.0/4 (multicast)",
		"fe80::/10":              "--pools: fe80::/10 overlaps fe80::/10 (link-local)",
		"10.0.0.0/8,10.1.0.0/16": "--pools: 10.0.0.0/8 and 10.1.0.0/16 overlap",
	} {
		if err := checkPools(mustPrefixes(t, in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("checkPools(%s): %v, want %q", in, err, want)
		}
	}
}

func mustPrefixes(t *testing.T, s string) []netip.Prefix {
	t.Helper()
	ps, err := parsePrefixes("pools", s)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}
