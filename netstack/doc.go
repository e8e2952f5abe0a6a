package netstack
