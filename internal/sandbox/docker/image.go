package docker

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/image"
)

// engineImage is an image in the engine that sandboxes run on.
type engineImage struct {
	id       string
	mplCache bool
}

// Reference is the engine's name of the cellbox image name: cellbox/NAME:TAG, where tag
// is a build's hash for an image imported from the store, "latest" for one built from its
// Dockerfile.
func Reference(name, tag string) string { return "cellbox/" + name + ":" + tag }

// importTimeout bounds one import of a root filesystem (a couple of GB).
const importTimeout = 30 * time.Minute

// image returns the engine's image for the cellbox image name. An image the store has runs
// as cellbox/NAME:HASH, imported first when the engine lacks that build; without the
// store's image, the engine's cellbox/NAME:latest (built from `cellbox image dockerfile`)
// is used.
func (b *Backend) image(ctx context.Context, name string) (engineImage, error) {
	var built *image.Image
	if b.images != nil {
		im, err := b.images.Get(name)
		switch {
		case err == nil:
			built = im
		case !errors.Is(err, errdefs.ErrNotFound):
			return engineImage{}, err
		}
	}
	if built == nil {
		ref := Reference(name, "latest")
		im, err := b.inspect(ctx, ref)
		if cerrdefs.IsNotFound(err) {
			return engineImage{}, fmt.Errorf("image %q is not built on this server nor in the Docker engine: build it with `cellbox image build %s` (Linux, as root), or with `cellbox image dockerfile %s | docker build -t %s -`: %w",
				name, name, name, ref, errdefs.ErrNotFound)
		}
		return im, err
	}
	ref := Reference(name, built.Hash)
	if im, err := b.inspect(ctx, ref); !cerrdefs.IsNotFound(err) {
		return im, err
	}
	// One import at a time (each reads gigabytes); a caller that gives up stops waiting.
	select {
	case b.importing <- struct{}{}:
		defer func() { <-b.importing }()
	case <-ctx.Done():
		return engineImage{}, fmt.Errorf("wait to import image %s: %w", name, ctx.Err())
	}
	if im, err := b.inspect(ctx, ref); !cerrdefs.IsNotFound(err) {
		return im, err // imported meanwhile
	}
	if err := b.importImage(ctx, built, ref); err != nil {
		return engineImage{}, err
	}
	return b.inspect(ctx, ref)
}

// inspect finds ref in the engine; an error that is not the engine's not-found is classified.
func (b *Backend) inspect(ctx context.Context, ref string) (engineImage, error) {
	ctx, cancel := context.WithTimeout(ctx, engineTimeout)
	defer cancel()
	info, err := b.cli.ImageInspect(ctx, ref)
	if cerrdefs.IsNotFound(err) {
		return engineImage{}, err
	}
	if err != nil {
		return engineImage{}, fmt.Errorf("find image %s in the Docker engine: %w", ref, engineError(err))
	}
	return engineImage{id: info.ID, mplCache: labels(info)[labelMPLCache] == "true"}, nil
}

func labels(info client.ImageInspectResult) map[string]string {
	if info.Config == nil {
		return nil
	}
	return info.Config.Labels
}

// importImage imports the root filesystem of im into the engine as ref, labelled with its
// name and hash.
func (b *Backend) importImage(ctx context.Context, im *image.Image, ref string) error {
	start := time.Now()
	b.log.Info("importing an image into the Docker engine", "image", im.Name, "hash", im.Hash, "size_bytes", im.SizeBytes)
	ctx, cancel := context.WithTimeout(ctx, importTimeout)
	defer cancel()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, im.Root)) }()
	defer pr.Close()
	mpl := "false"
	if im.MPLCache {
		mpl = "true"
	}
	rc, err := b.cli.ImageImport(ctx, client.ImageImportSource{Source: pr, SourceName: "-"}, ref, client.ImageImportOptions{
		Changes: []string{fmt.Sprintf("LABEL %s=%s %s=%s %s=%s", labelImage, im.Name, labelHash, im.Hash, labelMPLCache, mpl)},
	})
	if err != nil {
		return fmt.Errorf("import image %s into the Docker engine: %w", im.Name, engineError(err))
	}
	defer rc.Close()
	// The engine answers with a JSON stream of progress, or of an error.
	dec := json.NewDecoder(rc)
	for {
		var msg struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&msg); err == io.EOF {
			break
		} else if err != nil {
			return fmt.Errorf("import image %s into the Docker engine: %w: %w", im.Name, err, errdefs.ErrUnavailable)
		}
		if msg.Error != "" {
			return fmt.Errorf("import image %s into the Docker engine: %s: %w", im.Name, msg.Error, errdefs.ErrUnavailable)
		}
	}
	b.log.Info("imported the image", "image", im.Name, "took", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// writeTar writes the tree at root as a tar stream: files, folders, symlinks and hard links
// with their owners and modes. The contents of proc, sys and dev are left out (mount points).
func writeTar(w io.Writer, root string) error {
	tw := tar.NewWriter(w)
	type inode struct{ dev, ino uint64 }
	seen := map[inode]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		}
		if fi.Mode()&(fs.ModeSocket|fs.ModeNamedPipe|fs.ModeDevice|fs.ModeCharDevice) != 0 {
			return nil // nothing a sandbox needs; the engine makes /dev
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name, hdr.Uname, hdr.Gname = rel, "", ""
		if fi.IsDir() {
			hdr.Name += "/"
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() && st.Nlink > 1 {
			key := inode{uint64(st.Dev), uint64(st.Ino)}
			if first, ok := seen[key]; ok {
				hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
			} else {
				seen[key] = rel
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeReg {
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			if err != nil {
				return err
			}
		}
		if fi.IsDir() && (rel == "proc" || rel == "sys" || rel == "dev") {
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// PrepareImage makes the cellbox image name ready in the engine (importing it from the
// image store when the engine lacks this build of it), so that a missing image fails a
// server's start rather than its first session.
func (b *Backend) PrepareImage(ctx context.Context, name string) error {
	_, err := b.ImageID(ctx, name)
	return err
}

// ImageID makes the cellbox image name ready in the engine, as PrepareImage does, and
// returns the engine's id of it (for `docker run` and the like).
func (b *Backend) ImageID(ctx context.Context, name string) (string, error) {
	if err := image.CheckName(name); err != nil {
		return "", err
	}
	im, err := b.image(ctx, name)
	return im.id, err
}
