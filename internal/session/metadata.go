package session

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/cellbox/cellbox/internal/errdefs"
)

// A session's metadata is free-form labels its creator attaches (api.CreateSessionRequest):
// kept with the session and its record, returned by Get and List, never interpreted. These
// limits keep what every session may make the server hold, and write at each save, small.
const (
	maxMetadataEntries  = 64
	maxMetadataKeyBytes = 256
	maxMetadataValBytes = 1024
	maxMetadataBytes    = 16 << 10 // keys and values together
)

// checkMetadata refuses metadata past the limits, or that is not UTF-8 text without NUL
// bytes (a record could not keep it as it is).
func checkMetadata(md map[string]string) error {
	if len(md) > maxMetadataEntries {
		return fmt.Errorf("metadata has %d entries; at most %d: %w", len(md), maxMetadataEntries, errdefs.ErrInvalidArgument)
	}
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the same error for the same metadata
	n := 0
	for _, k := range keys {
		v := md[k]
		n += len(k) + len(v)
		switch {
		case k == "":
			return fmt.Errorf("metadata has an empty key: %w", errdefs.ErrInvalidArgument)
		case len(k) > maxMetadataKeyBytes:
			return fmt.Errorf("metadata key %s is %d bytes; at most %d: %w", quoteShort(k), len(k), maxMetadataKeyBytes, errdefs.ErrInvalidArgument)
		case len(v) > maxMetadataValBytes:
			return fmt.Errorf("metadata %s is %d bytes; at most %d: %w", quoteShort(k), len(v), maxMetadataValBytes, errdefs.ErrInvalidArgument)
		case strings.ContainsRune(k, 0) || strings.ContainsRune(v, 0):
			return fmt.Errorf("metadata %s contains a NUL byte: %w", quoteShort(k), errdefs.ErrInvalidArgument)
		case !utf8.ValidString(k) || !utf8.ValidString(v):
			return fmt.Errorf("metadata %s is not UTF-8 text: %w", quoteShort(k), errdefs.ErrInvalidArgument)
		}
	}
	if n > maxMetadataBytes {
		return fmt.Errorf("metadata is %d bytes (keys and values); at most %d: %w", n, maxMetadataBytes, errdefs.ErrInvalidArgument)
	}
	return nil
}

// quoteShort quotes s for an error message, cut to its first 64 bytes.
func quoteShort(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%q...", s[:64])
	}
	return fmt.Sprintf("%q", s)
}
