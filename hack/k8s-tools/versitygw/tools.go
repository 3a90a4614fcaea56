//go:build tools

// Package tools pins the S3-compatible object store the real node runs for backup tests
// (versitygw's POSIX gateway: real SigV4, multipart uploads, user metadata; Apache-2.0).
// Nothing here is part of the product.
package tools

import _ "github.com/versity/versitygw/cmd/versitygw"
