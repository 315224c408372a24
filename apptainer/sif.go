package apptainer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/apptainer/sif/v2/pkg/sif"
)

// Image is what Inspect reads from a SIF file.
type Image struct {
	Path    string    `json:"path"`
	Size    int64     `json:"size"`
	ID      string    `json:"id"`
	Version string    `json:"sif_version"`
	Created time.Time `json:"created"`
	// Arch is the architecture of the primary system partition
	// ("amd64", "arm64").
	Arch string `json:"arch"`
	// Labels are the image's labels (%labels and the builder's own), from
	// a labels object (Apptainer < 1.2) or a JSON.Generic object
	// {"data":{"attributes":{"labels":{…}}}} (Apptainer ≥ 1.2).
	Labels map[string]string `json:"labels"`
	// Definition is the definition file the image was built from.
	Definition string      `json:"definition"`
	Partitions []Partition `json:"partitions"`
	// Signed reports whether the image holds any signature object.
	Signed bool `json:"signed"`
}

// Partition is one file system object of the image.
type Partition struct {
	ID   uint32 `json:"id"`
	FS   string `json:"fs"`
	Type string `json:"type"`
	Arch string `json:"arch"`
	Size int64  `json:"size"`
}

// Inspect reads a SIF file's header and metadata objects (never the file
// systems): its architecture, labels, definition and partitions.
func Inspect(path string) (*Image, error) {
	fi, err := sif.LoadContainerFromPath(path, sif.OptLoadWithFlag(os.O_RDONLY))
	if err != nil {
		return nil, fmt.Errorf("sif %s: %w", path, err)
	}
	defer fi.UnloadContainer()
	img := &Image{Path: path, ID: fi.ID(), Version: fi.Version(), Created: fi.CreatedAt().UTC(),
		Arch: fi.PrimaryArch(), Labels: map[string]string{}, Partitions: []Partition{}}
	if st, err := os.Stat(path); err == nil {
		img.Size = st.Size()
	}
	var errs []error
	fi.WithDescriptors(func(d sif.Descriptor) bool {
		switch d.DataType() {
		case sif.DataDeffile:
			b, err := d.GetData()
			if err != nil {
				errs = append(errs, fmt.Errorf("definition object %d: %w", d.ID(), err))
				break
			}
			img.Definition = string(b)
		case sif.DataLabels:
			b, err := d.GetData()
			if err != nil {
				errs = append(errs, fmt.Errorf("labels object %d: %w", d.ID(), err))
				break
			}
			if err := decodeLabels(b, img.Labels); err != nil {
				errs = append(errs, fmt.Errorf("labels object %d: %w", d.ID(), err))
			}
		case sif.DataGenericJSON:
			// Apptainer ≥ 1.2 keeps the labels here:
			// {"data":{"attributes":{"labels":{…}}}}. Other JSON objects
			// are not labels and are skipped.
			b, err := d.GetData()
			if err != nil {
				errs = append(errs, fmt.Errorf("JSON object %d: %w", d.ID(), err))
				break
			}
			var doc struct {
				Data struct {
					Attributes struct {
						Labels json.RawMessage `json:"labels"`
					} `json:"attributes"`
				} `json:"data"`
			}
			if json.Unmarshal(b, &doc) != nil || len(doc.Data.Attributes.Labels) == 0 || string(doc.Data.Attributes.Labels) == "null" {
				break
			}
			if err := decodeLabels(doc.Data.Attributes.Labels, img.Labels); err != nil {
				errs = append(errs, fmt.Errorf("labels in JSON object %d: %w", d.ID(), err))
			}
		case sif.DataPartition:
			fs, pt, arch, err := d.PartitionMetadata()
			if err != nil {
				errs = append(errs, fmt.Errorf("partition object %d: %w", d.ID(), err))
				break
			}
			img.Partitions = append(img.Partitions, Partition{ID: d.ID(), FS: fs.String(), Type: pt.String(), Arch: arch, Size: d.Size()})
		case sif.DataSignature:
			img.Signed = true
		}
		return false
	})
	sort.Slice(img.Partitions, func(i, j int) bool { return img.Partitions[i].ID < img.Partitions[j].ID })
	if err := errors.Join(errs...); err != nil {
		return img, fmt.Errorf("sif %s: %w", path, err)
	}
	return img, nil
}

// decodeLabels reads a labels object: a JSON object of strings (values of
// other types are kept as their JSON text).
func decodeLabels(b []byte, into map[string]string) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	for k, v := range raw {
		var s string
		if json.Unmarshal(v, &s) == nil {
			into[k] = s
		} else {
			into[k] = string(v)
		}
	}
	return nil
}

// FileDigest returns "sha256:<hex>" of the file at path, streamed.
func FileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("sha256 %s: %w", path, err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
