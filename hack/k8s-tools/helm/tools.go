//go:build tools

// Package tools pins an upstream command that the tests run (helm lint, helm template).
// Nothing here is part of the product.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
