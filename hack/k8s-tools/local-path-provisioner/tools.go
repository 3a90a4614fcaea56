//go:build tools

// Package tools pins local-path-provisioner, the real node's StorageClass (as kind has it): it
// provisions a directory per claim that any user may write, so a Pod running as a non-root user
// can use its volume. Nothing here is part of the product.
package tools

import (
	_ "github.com/rancher/local-path-provisioner"
)
