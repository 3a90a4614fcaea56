//go:build tools

// Package tools pins an upstream command that the local test cluster runs.
// Nothing here is part of the product.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
