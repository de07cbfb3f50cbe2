// An outside reader of a Flashgate sale log (API.md v1.4 "The verifiable sale"), built on Go's own
// transparency-log packages, golang.org/x/mod/sumdb/tlog and note (the code behind the Go checksum
// database), not on anything of Flashgate's: it opens the checkpoint with the verifier key, reads the
// tree through tlog's tile reader (which checks every tile it reads against the signed root), hashes
// every entry of the entry bundles with tlog.RecordHash, checks each against the tree and proves one
// with tlog.ProveRecord/CheckRecord, and prints what it found as JSON.
//
// Built offline in GOPATH mode from Debian's golang-go and golang-golang-x-mod-dev (.ci/run installs
// them): GOPATH=/usr/share/gocode GO111MODULE=off go run tools/tlog-reader/main.go <base-url> <sku>
package main

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

const height = 8

func get(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET %s: %d", url, resp.StatusCode)
	}
	return body, nil
}

// tiles reads hash tiles from the log's C2SP paths: Go's paths carry the height (tile/8/L/N), C2SP's not.
type tiles struct{ base string }

func (t tiles) Height() int { return height }
func (t tiles) ReadTiles(ts []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(ts))
	for i, tile := range ts {
		path := strings.Replace(tile.Path(), fmt.Sprintf("tile/%d/", height), "tile/", 1)
		data, err := get(t.base + "/" + path)
		if err != nil {
			return nil, err
		}
		out[i] = data
	}
	return out, nil
}
func (t tiles) SaveTiles([]tlog.Tile, [][]byte) {}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "tlog-reader: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	if len(os.Args) != 3 {
		fail("usage: tlog-reader <base-url> <sku>")
	}
	base := strings.TrimRight(os.Args[1], "/")
	logURL := base + "/api/skus/" + os.Args[2] + "/log"

	key, err := get(base + "/api/log/key")
	if err != nil {
		fail("%v", err)
	}
	verifier, err := note.NewVerifier(strings.TrimSpace(string(key)))
	if err != nil {
		fail("the key: %v", err)
	}
	signed, err := get(logURL + "/checkpoint")
	if err != nil {
		fail("%v", err)
	}
	opened, err := note.Open(signed, note.VerifierList(verifier))
	if err != nil {
		fail("the checkpoint: %v", err)
	}
	lines := strings.Split(opened.Text, "\n")
	if len(lines) < 4 {
		fail("the checkpoint has %d lines", len(lines))
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil {
		fail("the checkpoint's size: %v", err)
	}
	rootBytes, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(rootBytes) != tlog.HashSize {
		fail("the checkpoint's root: %q", lines[2])
	}
	var root tlog.Hash
	copy(root[:], rootBytes)
	tree := tlog.Tree{N: size, Hash: root}

	// The tile reader checks each tile it reads against the tree's root.
	reader := tlog.TileHashReader(tree, tiles{logURL})
	computed, err := tlog.TreeHash(size, reader)
	if err != nil {
		fail("the tree from its tiles: %v", err)
	}
	if computed != root {
		fail("the root from the tiles is not the checkpoint's")
	}

	// Every entry: its record hash is the stored leaf hash the tiles give.
	var entries int64
	for n := int64(0); n*256 < size; n++ {
		width := size - n*256
		path := fmt.Sprintf("%s/tile/entries/%s", logURL, strings.TrimPrefix(tlog.Tile{H: height, L: 0, N: n, W: 256}.Path(), fmt.Sprintf("tile/%d/0/", height)))
		if width < 256 {
			path += fmt.Sprintf(".p/%d", width)
		} else {
			width = 256
		}
		bundle, err := get(path)
		if err != nil {
			fail("%v", err)
		}
		for at := 0; at < len(bundle); {
			length := int(binary.BigEndian.Uint16(bundle[at:]))
			entry := bundle[at+2 : at+2+length]
			at += 2 + length
			index := entries
			hashes, err := reader.ReadHashes([]int64{tlog.StoredHashIndex(0, index)})
			if err != nil {
				fail("leaf %d: %v", index, err)
			}
			if hashes[0] != tlog.RecordHash(entry) {
				fail("entry %d does not hash to the tree's leaf %d", index, index)
			}
			entries++
		}
	}
	if entries != size {
		fail("the bundles hold %d entries, the checkpoint %d", entries, size)
	}
	proved := int64(-1)
	if size > 0 {
		proved = size / 2
		proof, err := tlog.ProveRecord(size, proved, reader)
		if err != nil {
			fail("proving entry %d: %v", proved, err)
		}
		leaf, _ := reader.ReadHashes([]int64{tlog.StoredHashIndex(0, proved)})
		if err := tlog.CheckRecord(proof, size, root, proved, leaf[0]); err != nil {
			fail("entry %d's proof: %v", proved, err)
		}
	}
	out, _ := json.Marshal(map[string]any{
		"origin":  lines[0],
		"size":    size,
		"root":    base64.StdEncoding.EncodeToString(root[:]),
		"entries": entries,
		"proved":  proved,
		"key":     verifier.Name(),
	})
	fmt.Println(string(out))
}
