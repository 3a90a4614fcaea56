//go:build tools

// Package tools pins CloudNativePG, the PostgreSQL operator `cargo xtask bench-stateful
// --cloudnative-pg` runs beside SampleDB on the real node (its manager binary, built here into
// an image of its own, and its release manifest from the same module). Nothing here is part of
// the product.
package tools

import _ "github.com/cloudnative-pg/cloudnative-pg/cmd/manager"
