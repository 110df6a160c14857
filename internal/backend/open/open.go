// Package open builds a backend.Backend from a backend.Spec, choosing the
// implementation by Spec.Kind. It lives apart from package backend so that
// the interface package does not import its implementations.
package open

import (
	"context"
	"fmt"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/backend/fs"
	"github.com/slipstream-io/slipstream/internal/backend/s3"
)

// New returns the backend spec describes.
func New(ctx context.Context, spec backend.Spec) (backend.Backend, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	switch spec.Kind {
	case "s3":
		return s3.New(ctx, spec)
	case "fs":
		return fs.New(spec)
	}
	return nil, fmt.Errorf("%w: kind %q", backend.ErrInvalidSpec, spec.Kind)
}
