// Package models holds ferry's database schema: the GORM models, the
// versioned migrations, and opening a database on either supported engine.
//
// ferry runs on MySQL 8 / MariaDB 10.6+ in production and on SQLite (pure
// Go, no cgo) for the embedded default. The migrations in migrations/ are
// numbered SQL templates; the same files run on both engines, with a few
// template functions ({{pk}}, {{ts}}, {{text}}, {{opts}}, {{exact N}},
// {{if mysql}}) standing in for what the engines spell differently. Migrate
// applies the ones a database lacks, in order, and records each in
// schema_migrations. GORM's AutoMigrate is not used: it keeps no history
// and never drops or renames.
//
// Identity compares byte for byte on both engines. MySQL's utf8mb4_bin
// pads with spaces ('abc' = 'abc '), so every column holding an id, a
// reference to one, a key, a hash or a name is VARBINARY there ({{exact
// N}}, migration 0010); TestIdentityColumnsAreExact fails for a new text
// column that is not on its list of free-text and enumeration columns.
//
// Models are storage types. They never leave the domain packages as JSON;
// package server converts them to its own response types.
package models
