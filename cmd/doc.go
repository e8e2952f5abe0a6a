// Package cmd holds skein's thin mains, one folder each: skein-gateway, skein-agent,
// skein-controller and skeinctl. A main parses flags and calls into appliance or control;
// nothing imports cmd.
package cmd
