package sandboxtest

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/sandbox"
)

// Images is a fake of a backend on images for the tests of what lies above the backends
// (sessions, their pools, the APIs): b, a backend on no image (local-unsafe), runs every
// sandbox, and Images notes the image each was asked to run on. An image not in built is
// refused as a backend on images refuses it: errdefs.ErrNotFound, naming the command
// that builds it.
func Images(b sandbox.Backend, built ...string) *ImageFake {
	return &ImageFake{Backend: b, built: built, images: map[string]string{}}
}

// ImageFake is the backend of Images.
type ImageFake struct {
	sandbox.Backend
	built []string

	mu     sync.Mutex
	images map[string]string // sandbox id → its Spec.Image
}

func (f *ImageFake) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if !slices.Contains(f.built, spec.Image) {
		return nil, fmt.Errorf("image %q is not built on this machine: run `cellbox image build %s`: %w", spec.Image, spec.Image, errdefs.ErrNotFound)
	}
	f.mu.Lock()
	f.images[spec.ID] = spec.Image
	f.mu.Unlock()
	spec.Image = ""
	return f.Backend.Create(ctx, spec)
}

// ImageOf is the image sandbox id was created on; "?" when it was not created here.
func (f *ImageFake) ImageOf(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if img, ok := f.images[id]; ok {
		return img
	}
	return "?"
}

// Sandboxes are the ids of the sandboxes created on image so far.
func (f *ImageFake) Sandboxes(image string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for id, img := range f.images {
		if img == image {
			ids = append(ids, id)
		}
	}
	return ids
}
