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

// Reference is the engine's name of the cellbox image name.
func Reference(name string) string { return "cellbox/" + name + ":latest" }

// importTimeout bounds one import of a root filesystem (a couple of GB).
const importTimeout = 30 * time.Minute

// image returns the engine's image for the cellbox image name. When the image store has
// the image and the engine has not this build of it (by the cellbox.hash label), the
// store's root filesystem is imported first, as cellbox/NAME:latest. Without the store's
// image, the engine's cellbox/NAME (built from `cellbox image dockerfile`) is used.
func (b *Backend) image(ctx context.Context, name string) (engineImage, error) {
	ref := Reference(name)
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
	if built != nil {
		b.importMu.Lock()
		defer b.importMu.Unlock()
	}
	ictx, cancel := context.WithTimeout(ctx, engineTimeout)
	defer cancel()
	info, err := b.cli.ImageInspect(ictx, ref)
	switch {
	case err == nil && (built == nil || labels(info)[labelHash] == built.Hash):
		return engineImage{id: info.ID, mplCache: labels(info)[labelMPLCache] == "true"}, nil
	case err != nil && !cerrdefs.IsNotFound(err):
		return engineImage{}, fmt.Errorf("find image %s in the Docker engine: %w", ref, engineError(err))
	case built == nil:
		return engineImage{}, fmt.Errorf("image %q is not built on this server nor in the Docker engine: build it with `cellbox image build %s` (Linux, as root), or with `cellbox image dockerfile %s | docker build -t %s -`: %w",
			name, name, name, ref, errdefs.ErrNotFound)
	}
	if err := b.importImage(ctx, built, ref); err != nil {
		return engineImage{}, err
	}
	ictx, cancel = context.WithTimeout(ctx, engineTimeout)
	defer cancel()
	if info, err = b.cli.ImageInspect(ictx, ref); err != nil {
		return engineImage{}, fmt.Errorf("find image %s after importing it: %w", ref, engineError(err))
	}
	return engineImage{id: info.ID, mplCache: built.MPLCache}, nil
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
	if err := image.CheckName(name); err != nil {
		return err
	}
	_, err := b.image(ctx, name)
	return err
}
