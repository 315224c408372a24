// Package siftest writes small SIF files for tests, laid out as apptainer
// build lays one out: a definition object, the labels (a labels object, or
// with Apptainer ≥ 1.2 a JSON.Generic object) and a primary squashfs
// partition (whose bytes are not a real file system).
package siftest

import (
	"bytes"
	"testing"
	"time"

	"github.com/apptainer/sif/v2/pkg/sif"
)

// ID is the id of every image Write makes.
const ID = "8c3b6f0e-8c34-4a2b-9f41-5d7b8e2f7a10"

// PartitionBytes is the size of the partition Write adds.
const PartitionBytes = 8192

// Write writes the SIF file at path, its labels in a labels object (the
// layout of Apptainer before 1.2).
func Write(t testing.TB, path, definition, labelsJSON string) {
	t.Helper()
	write(t, path, definition, sif.DataLabels, []byte(labelsJSON))
}

// WriteGenericLabels writes the SIF file at path as Apptainer ≥ 1.2 lays
// one out: the labels in a JSON.Generic object,
// {"data":{"attributes":{"labels":{…}}}}, and no labels object.
func WriteGenericLabels(t testing.TB, path, definition, labelsJSON string) {
	t.Helper()
	doc := `{"type":"container","data":{"attributes":{"labels":` + labelsJSON + `}}}`
	write(t, path, definition, sif.DataGenericJSON, []byte(doc))
}

func write(t testing.TB, path, definition string, labelsType sif.DataType, labels []byte) {
	t.Helper()
	var objs []sif.DescriptorInput
	add := func(dt sif.DataType, data []byte, opts ...sif.DescriptorInputOpt) {
		di, err := sif.NewDescriptorInput(dt, bytes.NewReader(data), opts...)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, di)
	}
	add(sif.DataDeffile, []byte(definition))
	add(labelsType, labels)
	add(sif.DataPartition, bytes.Repeat([]byte("squashfs"), PartitionBytes/8), sif.OptPartitionMetadata(sif.FsSquash, sif.PartPrimSys, "amd64"))
	when := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	f, err := sif.CreateContainerAtPath(path, sif.OptCreateWithDescriptors(objs...), sif.OptCreateWithTime(when), sif.OptCreateWithID(ID))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.UnloadContainer(); err != nil {
		t.Fatal(err)
	}
}
