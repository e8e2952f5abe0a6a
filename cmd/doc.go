// Package cmd holds skein's thin mains, one folder each: skein-gateway, skein-agent,
// skein-controller, skeinctl and skein-probe (the connectivity probe the lab, the end-to-end
// tests and the benchmark harness run). A main parses flags and calls into appliance or control;
// nothing imports cmd.
package cmd
