package main

import (
	"encoding/base64"
	"encoding/binary"
	"hash/crc32"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodeCRC32C is a CRC32C as S3 writes it: base64 of the big-endian value.
func encodeCRC32C(v uint32) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return base64.StdEncoding.EncodeToString(b[:])
}

// crc32cCombine returns the CRC32C of A followed by B from crcA, crcB and
// B's length, without the bytes: zlib's crc32_combine (the GF(2) matrix
// method, O(log n) per call), which hash/crc32 does not offer.
func crc32cCombine(crcA, crcB uint32, lenB int64) uint32 {
	if lenB <= 0 {
		return crcA
	}
	var even, odd [32]uint32
	// odd is the operator for one zero bit: the reflected polynomial,
	// then the identity shifted.
	odd[0] = 0x82f63b78 // Castagnoli, reflected
	row := uint32(1)
	for n := 1; n < 32; n++ {
		odd[n] = row
		row <<= 1
	}
	gf2Square(even[:], odd[:]) // two zero bits
	gf2Square(odd[:], even[:]) // four
	// Apply lenB zero bytes to crcA, squaring the operator for each bit
	// of lenB (the first squaring below makes it one zero byte).
	for {
		gf2Square(even[:], odd[:])
		if lenB&1 != 0 {
			crcA = gf2Times(even[:], crcA)
		}
		lenB >>= 1
		if lenB == 0 {
			break
		}
		gf2Square(odd[:], even[:])
		if lenB&1 != 0 {
			crcA = gf2Times(odd[:], crcA)
		}
		lenB >>= 1
		if lenB == 0 {
			break
		}
	}
	return crcA ^ crcB
}

func gf2Times(mat []uint32, vec uint32) uint32 {
	var sum uint32
	for i := 0; vec != 0; i, vec = i+1, vec>>1 {
		if vec&1 != 0 {
			sum ^= mat[i]
		}
	}
	return sum
}

func gf2Square(square, mat []uint32) {
	for n := range 32 {
		square[n] = gf2Times(mat, mat[n])
	}
}
