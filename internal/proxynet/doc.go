// Package proxynet builds the proxied network of a workspace's Docker
// sandboxes: an egress network and a gateway container (the only way out),
// an internal sandbox network with no host address, and a netclient
// container whose namespace the sandboxed containers join and whose rules
// send everything to the gateway. It also prepares what sandboxed containers
// need to trust the gateway's TLS interception (CA file, combined bundle,
// Java trust store, and the environment variables runtimes read).
package proxynet
