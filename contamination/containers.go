package contamination

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"compress/zlib"
	"encoding/base64"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// Encoded text. A training loader reads a compressed data file as readily
// as a plain one (datasets and pandas open .jsonl.gz, .zst, .xz, .bz2 and
// zip archives), and a script decodes a base64 string in one call, so the
// checker reads through them too: a decoded file (a binary section's
// result) or a base64 blob of the added text that starts with the magic
// of gzip, bzip2, xz, zstd, zip or tar is unpacked (nested up to
// maxUnpackDepth) and its content checked as added text; zlib streams are
// tried too. A container that is corrupt or exceeds the decoding bound is
// refused; an archive format the checker does not read (7z, rar) is
// refused. Other bytes (images, weights) are lexed as they are.

// maxUnpackDepth bounds nested decoding (base64 of a tar.gz of a zip...).
const maxUnpackDepth = 4

var errUnreadable = errors.New("an archive format the checker does not read")

type magic struct {
	name   string
	prefix string
	off    int
}

var magics = []magic{
	{"gzip", "\x1f\x8b", 0},
	{"bzip2", "BZh", 0},
	{"xz", "\xfd7zXZ\x00", 0},
	{"zstd", "\x28\xb5\x2f\xfd", 0},
	{"zip", "PK\x03\x04", 0},
	{"zip", "PK\x05\x06", 0},
	{"tar", "ustar", 257},
	{"7z", "7z\xbc\xaf\x27\x1c", 0},
	{"rar", "Rar!\x1a\x07", 0},
}

// sniff names the container format of b ("" for none).
func sniff(b []byte) string {
	for _, m := range magics {
		if len(b) >= m.off+len(m.prefix) && string(b[m.off:m.off+len(m.prefix)]) == m.prefix {
			return m.name
		}
	}
	if len(b) >= 2 && b[0]&0x0f == 8 && b[0]>>4 <= 7 && (uint16(b[0])<<8|uint16(b[1]))%31 == 0 && b[1]&0x20 == 0 {
		return "zlib"
	}
	return ""
}

// part is one file a container holds.
type part struct {
	name string // the member's name in an archive; "" for a stream
	data []byte
}

// readCapped reads r to its end, failing past budget bytes.
func readCapped(r io.Reader, budget int64) ([]byte, error) {
	if budget < 0 {
		budget = 0
	}
	b, err := io.ReadAll(io.LimitReader(r, budget+1))
	if int64(len(b)) > budget {
		return nil, errBudget
	}
	return b, err // what was read before an error, with it
}

var errBudget = errors.New("more than the decoding bound")

// unpack opens the container b of format kind and returns what it holds,
// within budget bytes in all.
func unpack(kind string, b []byte, budget int64) ([]part, error) {
	var r io.Reader
	switch kind {
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		r = zr
	case "zlib":
		zr, err := zlib.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		r = zr
	case "bzip2":
		r = bzip2.NewReader(bytes.NewReader(b))
	case "xz":
		xr, err := xz.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		r = xr
	case "zstd":
		zr, err := zstd.NewReader(bytes.NewReader(b), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(uint64(max(budget, 1<<20))))
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		r = zr
	case "zip":
		zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return nil, err
		}
		registerZipMethods(zr)
		var parts []part
		for _, f := range zr.File {
			if f.FileInfo().IsDir() {
				continue
			}
			if f.Flags&0x1 != 0 {
				return parts, fmt.Errorf("member %q is encrypted: %w", f.Name, errUnreadable)
			}
			if int64(f.UncompressedSize64) > budget {
				return nil, fmt.Errorf("member %q: %w", f.Name, errBudget)
			}
			rc, err := f.Open()
			if errors.Is(err, zip.ErrAlgorithm) {
				return parts, fmt.Errorf("member %q is compressed with method %d: %w", f.Name, f.Method, errUnreadable)
			}
			if err != nil {
				return nil, fmt.Errorf("member %q: %w", f.Name, err)
			}
			data, err := readCapped(rc, budget)
			rc.Close()
			if err != nil {
				return append(parts, part{name: f.Name, data: data}), fmt.Errorf("member %q: %w", f.Name, err)
			}
			budget -= int64(len(data))
			parts = append(parts, part{name: f.Name, data: data})
		}
		return parts, nil
	case "tar":
		tr := tar.NewReader(bytes.NewReader(b))
		var parts []part
		for {
			h, err := tr.Next()
			if err == io.EOF {
				return parts, nil
			}
			if err != nil {
				return parts, err
			}
			if h.Typeflag != tar.TypeReg {
				continue
			}
			data, err := readCapped(tr, budget)
			if err != nil {
				return append(parts, part{name: h.Name, data: data}), fmt.Errorf("member %q: %w", h.Name, err)
			}
			budget -= int64(len(data))
			parts = append(parts, part{name: h.Name, data: data})
		}
	default:
		return nil, fmt.Errorf("%s: %w", kind, errUnreadable)
	}
	data, err := readCapped(r, budget)
	if errors.Is(err, errBudget) {
		return nil, err
	}
	// a stream corrupt or cut short still yields what came before, as a
	// lenient reader would give it to a training script
	return []part{{data: data}}, err
}

// decodeB64 decodes a base64 blob in standard or URL-safe form, padded or
// not; ok is false when it is not base64.
func decodeB64(s []byte) ([]byte, bool) {
	t := bytes.TrimRight(s, "=")
	enc := base64.RawStdEncoding
	if bytes.ContainsAny(t, "-_") {
		enc = base64.RawURLEncoding
	}
	out := make([]byte, enc.DecodedLen(len(t)))
	n, err := enc.Decode(out, t)
	if err != nil {
		return nil, false
	}
	return out[:n], true
}

// registerZipMethods lets a zip reader read the members compressed with
// bzip2 (method 12), zstd (93) and xz (95) besides store and deflate; a
// member of any other method (LZMA, PPMd, ...) is refused as unreadable.
func registerZipMethods(zr *zip.Reader) {
	zr.RegisterDecompressor(12, func(r io.Reader) io.ReadCloser { return io.NopCloser(bzip2.NewReader(r)) })
	zr.RegisterDecompressor(93, func(r io.Reader) io.ReadCloser {
		d, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(64<<20))
		if err != nil {
			return io.NopCloser(errReader{err})
		}
		return d.IOReadCloser()
	})
	zr.RegisterDecompressor(95, func(r io.Reader) io.ReadCloser {
		x, err := xz.NewReader(r)
		if err != nil {
			return io.NopCloser(errReader{err})
		}
		return io.NopCloser(x)
	})
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
