package main

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/adler32"
	"hash/crc32"
	"math/rand/v2"
	"strings"
)

// pngImage encodes a w×h RGBA image of a noisy gradient as a PNG. The zlib stream uses stored
// deflate blocks, which keeps the bytes independent of any compressor's implementation while
// remaining a valid PNG; the noise gives the base64 the entropy of a compressed image.
func pngImage(r *rand.Rand, w, h int) []byte {
	raw := make([]byte, 0, h*(1+4*w))
	r0, g0, b0 := r.IntN(256), r.IntN(256), r.IntN(256)
	for y := range h {
		raw = append(raw, 0) // filter: none
		for x := range w {
			raw = append(raw,
				byte(r0+x*3+r.IntN(24)),
				byte(g0+y*3+r.IntN(24)),
				byte(b0+(x+y)*2+r.IntN(24)),
				byte(255-r.IntN(8)*(x%3)))
		}
	}
	var z []byte
	z = append(z, 0x78, 0x01)
	for off := 0; off < len(raw); off += 65535 {
		end := min(off+65535, len(raw))
		final := byte(0)
		if end == len(raw) {
			final = 1
		}
		n := uint16(end - off)
		z = append(z, final)
		z = binary.LittleEndian.AppendUint16(z, n)
		z = binary.LittleEndian.AppendUint16(z, ^n)
		z = append(z, raw[off:end]...)
	}
	z = binary.BigEndian.AppendUint32(z, adler32.Checksum(raw))

	chunk := func(out []byte, typ string, data []byte) []byte {
		out = binary.BigEndian.AppendUint32(out, uint32(len(data)))
		start := len(out)
		out = append(out, typ...)
		out = append(out, data...)
		return binary.BigEndian.AppendUint32(out, crc32.ChecksumIEEE(out[start:]))
	}
	png := []byte("\x89PNG\r\n\x1a\n")
	ihdr := binary.BigEndian.AppendUint32(nil, uint32(w))
	ihdr = binary.BigEndian.AppendUint32(ihdr, uint32(h))
	ihdr = append(ihdr, 8, 6, 0, 0, 0) // 8-bit RGBA, deflate, adaptive filtering, no interlace
	png = chunk(png, "IHDR", ihdr)
	png = chunk(png, "IDAT", z)
	return chunk(png, "IEND", nil)
}

func inlineImages(r *rand.Rand) string {
	var b strings.Builder
	b.WriteString(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Northwind — Order confirmation</title>
<style>
body{margin:0;font-family:Inter,system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1f2937;background:#f9fafb}
.container{max-width:640px;margin:0 auto;padding:24px}
.card{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:16px;margin-bottom:12px}
.muted{color:#6b7280;font-size:13px}
`)
	icons := []string{"cart", "truck", "check", "warning", "info", "user", "lock", "key", "gift", "star"}
	for _, icon := range icons {
		size := 16 + 4*r.IntN(5)
		fmt.Fprintf(&b, ".icon-%s{width:%dpx;height:%dpx;background-image:url(data:image/png;base64,%s)}\n",
			icon, size, size, base64.StdEncoding.EncodeToString(pngImage(r, size, size)))
	}
	b.WriteString("</style>\n</head>\n<body>\n<div class=\"container\">\n")
	b.WriteString("<h1>Thanks for your order</h1>\n<p class=\"muted\">We sent a receipt to your inbox. If you did not request a password reset recently, you can ignore the separate security email.</p>\n")
	for i := range 5 {
		w := 40 + 8*r.IntN(4)
		fmt.Fprintf(&b, "<div class=\"card\"><img alt=\"Product %d\" width=\"%d\" height=\"%d\" src=\"data:image/png;base64,%s\"><p>Item NW-%s-%d &times; %d</p></div>\n",
			i+1, w, w, base64.StdEncoding.EncodeToString(pngImage(r, w, w)), chars(r, upper, 4), 100+r.IntN(900), 1+r.IntN(3))
	}
	b.WriteString("<p class=\"muted\">Questions? Reply to this email or visit the help center. Keyboard shortcut: press ? to open help.</p>\n</div>\n</body>\n</html>\n")
	return b.String()
}

func hexdump(r *rand.Rand) string {
	var data []byte
	data = append(data, pngImage(r, 24, 24)...)
	elf := []byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0x3e, 0, 1, 0, 0, 0}
	data = append(data, elf...)
	data = append(data, randBytes(r, 40)...)
	data = append(data, "GCC: (Debian 12.2.0-14) 12.2.0\x00.shstrtab\x00.interp\x00.note.gnu.property\x00.note.gnu.build-id\x00.gnu.hash\x00.dynsym\x00.dynstr\x00.text\x00.rodata\x00.eh_frame\x00.data\x00.bss\x00"...)
	data = append(data, pngImage(r, 32, 40)...)
	data = append(data, "usage: nwctl [--config FILE] <command>\x00password reset requested\x00token expired\x00keyring: no such key\x00"...)
	for len(data) < 20000 {
		data = append(data, randBytes(r, 64)...)
		data = append(data, strings.Repeat("\x00", r.IntN(48))...)
	}
	var b strings.Builder
	b.WriteString("$ xxd build/nwctl.bin | head -n 1700\n")
	for off := 0; off < len(data); off += 16 {
		line := data[off:min(off+16, len(data))]
		fmt.Fprintf(&b, "%08x: ", off)
		for i := range 16 {
			if i < len(line) {
				fmt.Fprintf(&b, "%02x", line[i])
			} else {
				b.WriteString("  ")
			}
			if i%2 == 1 {
				b.WriteByte(' ')
			}
		}
		b.WriteByte(' ')
		for _, c := range line {
			if c >= 0x20 && c < 0x7f {
				b.WriteByte(c)
			} else {
				b.WriteByte('.')
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func goSum(r *rand.Rand) string {
	var b strings.Builder
	for _, m := range goModules() {
		for range 2 + r.IntN(5) {
			v := fmt.Sprintf("v%d.%d.%d", r.IntN(3), r.IntN(40), r.IntN(20))
			if strings.HasPrefix(m, "golang.org/x/") {
				v = fmt.Sprintf("v0.%d.0", 10+r.IntN(40))
			}
			if r.IntN(3) > 0 {
				fmt.Fprintf(&b, "%s %s h1:%s\n", m, v, base64.StdEncoding.EncodeToString(randBytes(r, 32)))
			}
			fmt.Fprintf(&b, "%s %s/go.mod h1:%s\n", m, v, base64.StdEncoding.EncodeToString(randBytes(r, 32)))
		}
	}
	return b.String()
}
