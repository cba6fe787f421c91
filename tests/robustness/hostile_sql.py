"""Untrusted SQL an agent might send, grouped by what each statement tries.

Statements use the `singer` (singer_id, name, country, age) and `concert` tables that both
Spider's `concert_singer` and the test fixture's `concerts` database have. Every statement in
`HOSTILE` must come back as an error; `CAPPED` ones may succeed, but only truncated and bounded;
`ODD_BUT_VALID` ones must succeed.
"""

from __future__ import annotations

_SERIES = "WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s)"
_SERIES_1E5 = "WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s LIMIT 100000)"
_BIG_A = "printf('%.*c', 900000, 'a')"


def _nested(depth: int) -> str:
    return "SELECT * FROM " + "(SELECT * FROM " * depth + "singer" + ")" * depth


WRITES = [
    "INSERT INTO singer (singer_id, name, country, age) VALUES (99, 'x', 'y', 1)",
    "INSERT OR REPLACE INTO singer (singer_id, name) VALUES (1, 'x')",
    "INSERT INTO singer SELECT * FROM singer",
    "REPLACE INTO singer (singer_id, name) VALUES (1, 'x')",
    "UPDATE singer SET name = 'pwned'",
    "UPDATE OR IGNORE singer SET age = age + 1 WHERE 1",
    "DELETE FROM singer",
    "DELETE FROM singer WHERE singer_id IN (SELECT singer_id FROM singer)",
    "INSERT INTO singer (singer_id, name) VALUES (1, 'x') ON CONFLICT DO UPDATE SET name = 'y'",
    "UPSERT INTO singer VALUES (1)",
    "WITH x AS (SELECT 1) INSERT INTO singer (singer_id) SELECT 99 FROM x",
    "WITH x AS (SELECT 1) UPDATE singer SET name = 'x'",
    "WITH x AS (SELECT 1) DELETE FROM singer",
    "WITH RECURSIVE x(n) AS (SELECT 1) REPLACE INTO singer (singer_id) SELECT n FROM x",
    "CREATE TABLE evil (x)",
    "CREATE TABLE evil AS SELECT * FROM singer",
    "CREATE TABLE IF NOT EXISTS singer (x)",
    "CREATE TEMP TABLE evil (x)",
    "CREATE TEMPORARY TABLE evil AS SELECT 1",
    "CREATE INDEX evil_idx ON singer (name)",
    "CREATE UNIQUE INDEX evil_idx ON singer (singer_id)",
    "CREATE VIEW evil AS SELECT 1",
    "CREATE TEMP VIEW evil AS SELECT 1",
    "CREATE TRIGGER evil AFTER INSERT ON singer BEGIN DELETE FROM singer; END",
    "CREATE TEMP TRIGGER evil AFTER INSERT ON singer BEGIN SELECT 1; END",
    "CREATE VIRTUAL TABLE evil USING fts5(x)",
    "DROP TABLE singer",
    "DROP TABLE IF EXISTS concert",
    "DROP INDEX IF EXISTS sqlite_autoindex_singer_1",
    "DROP VIEW IF EXISTS evil",
    "DROP TRIGGER IF EXISTS evil",
    "ALTER TABLE singer RENAME TO evil",
    "ALTER TABLE singer ADD COLUMN evil TEXT",
    "ALTER TABLE singer RENAME COLUMN name TO evil",
    "ALTER TABLE singer DROP COLUMN age",
    "VACUUM",
    "VACUUM main",
    "VACUUM INTO 'copy.sqlite'",
    "VACUUM INTO '/tmp/rollscope-vacuum-copy.sqlite'",
    "REINDEX",
    "REINDEX singer",
    "ANALYZE",
    "ANALYZE singer",
    "(((DELETE FROM singer)))",
    "-- a comment first\nDELETE FROM singer",
    "/* a comment first */ DROP TABLE singer",
    "EXPLAIN DELETE FROM singer",
]

ATTACH = [
    "ATTACH 'evil.sqlite' AS evil",
    "ATTACH DATABASE ':memory:' AS mem",
    "ATTACH 'file:evil.sqlite?mode=rwc' AS evil",
    "ATTACH '/tmp/rollscope-evil.sqlite' AS evil",
    "DETACH main",
    "DETACH DATABASE temp",
    "SELECT 1; ATTACH 'evil.sqlite' AS evil",
]

PRAGMAS = [
    "PRAGMA journal_mode = WAL",
    "PRAGMA journal_mode = DELETE",
    "PRAGMA writable_schema = ON",
    "PRAGMA query_only = OFF",
    "PRAGMA user_version = 7",
    "PRAGMA schema_version = 1",
    "PRAGMA application_id = 1",
    "PRAGMA locking_mode = EXCLUSIVE",
    "PRAGMA temp_store_directory = '.'",
    "PRAGMA cache_size = -4000000",
    "PRAGMA mmap_size = 1000000000",
    "PRAGMA wal_checkpoint(TRUNCATE)",
    "PRAGMA integrity_check",
    "PRAGMA table_info(singer)",
    "PRAGMA trusted_schema = ON",
    "PRAGMA hard_heap_limit = 0",
    "PRAGMA soft_heap_limit = 0",
    "SELECT * FROM pragma_table_info('singer')",
    "SELECT * FROM pragma_database_list",
    "SELECT * FROM pragma_compile_options",
    "SELECT * FROM pragma_function_list",
    "SELECT name FROM pragma_table_list",
    "SELECT * FROM pragma_index_list('singer')",
]

EXTENSIONS = [
    "SELECT load_extension('libm.so.6')",
    "SELECT load_extension('/tmp/evil.so', 'sqlite3_evil_init')",
    "SELECT LOAD_EXTENSION('x')",
    "SELECT fts3_tokenizer('simple')",
    "SELECT readfile('/etc/passwd')",
    "SELECT writefile('evil.txt', 'x')",
    "SELECT edit('x')",
    "SELECT * FROM json_each('[1, 2]')",
    "SELECT * FROM sqlite_dbpage",
    "SELECT * FROM dbstat",
]

TRANSACTIONS = [
    "BEGIN",
    "BEGIN IMMEDIATE",
    "BEGIN EXCLUSIVE TRANSACTION",
    "COMMIT",
    "END",
    "ROLLBACK",
    "SAVEPOINT sp",
    "RELEASE sp",
    "ROLLBACK TO sp",
    "SELECT 1; BEGIN",
    "SELECT 1; COMMIT",
]

MULTI_STATEMENT = [
    "SELECT 1; DELETE FROM singer",
    "SELECT ';'; DELETE FROM singer",
    "SELECT 'a;b'; UPDATE singer SET name = 'x'",
    'SELECT "a;" FROM singer; DROP TABLE singer',
    "SELECT 1 -- ;\n; DELETE FROM singer",
    "SELECT 1 /* ; */; DROP TABLE singer",
    "SELECT 1;\n\n/* hi */ DELETE FROM singer",
    "/* lead */ SELECT 1; VACUUM",
    "  \n\t select 1 ;  ;  ;  delete from singer",
    "WITH x AS (SELECT 1) SELECT * FROM x; DELETE FROM singer",
    "VALUES (1); DROP TABLE singer",
    "SELECT 1;\nSELECT 2",
    "SELECT 1；DELETE FROM singer",
    "SELECT 1; PRAGMA writable_schema = ON",
    "SELECT 1; CREATE TEMP TABLE t(x); INSERT INTO t VALUES (1)",
]

RUNAWAY = [
    f"{_SERIES} SELECT count(*) FROM s",
    "WITH RECURSIVE s(x) AS (SELECT 1 UNION SELECT x + 1 FROM s) SELECT count(*) FROM s",
    f"{_SERIES} SELECT max(x) FROM s",
    f"{_SERIES} SELECT x FROM s ORDER BY random() LIMIT 1",
    f"{_SERIES} SELECT x FROM s ORDER BY x DESC LIMIT 1",
    f"{_SERIES} SELECT count(DISTINCT x) FROM s",
    f"{_SERIES_1E5} SELECT count(*) FROM s a, s b",
    f"{_SERIES_1E5} SELECT sum(a.x * b.x) FROM s a JOIN s b ON a.x <> b.x",
    "SELECT count(*) FROM singer a, singer b, singer c, singer d, singer e, singer f, singer g,"
    " singer h, singer i, singer j, singer k",
    "SELECT count(*) FROM concert a, concert b, concert c, concert d, concert e, concert f,"
    " concert g, concert h, concert i, concert j, concert k",
    f"{_SERIES_1E5} SELECT (SELECT count(*) FROM s b WHERE b.x < a.x) FROM s a ORDER BY 1 DESC",
    f"{_SERIES_1E5} SELECT x FROM s a WHERE x = (SELECT max(x) FROM s b WHERE b.x <= a.x"
    " AND (SELECT count(*) FROM s c) > 0) ORDER BY 1 DESC LIMIT 1",
    f"{_SERIES_1E5} SELECT count(*) FROM s WHERE x IN (SELECT a.x * b.x FROM s a, s b)",
    f"{_SERIES} SELECT x FROM s GROUP BY x % 1000000007 HAVING count(*) > 1",
]

MEMORY_BOMBS = [
    "SELECT zeroblob(1000000000)",
    "SELECT zeroblob(1e9)",
    "SELECT randomblob(1000000000)",
    "SELECT length(randomblob(2000000))",
    "SELECT printf('%.*c', 1000000000, 'x')",
    "SELECT printf('%.*c', 1e9, 'x')",
    "SELECT printf('%.1000000000c', 'x')",
    "SELECT format('%.*c', 2147483647, 'x')",
    "SELECT printf('%*s', 1000000000, 'x')",
    "SELECT length(printf('%.*c', 1000000000, 'x')) > 0 AND zeroblob(1e9)",
    "SELECT replace(replace(replace(hex(zeroblob(100000)), '0', '00'), '0', '00'), '0', '00')",
    "SELECT replace(hex(zeroblob(400000)), '0', '00')",
    "SELECT hex(randomblob(600000))",
    "SELECT quote(zeroblob(600000))",
    f"SELECT group_concat(x) FROM ({_SERIES} SELECT x FROM s)",
    f"SELECT length(group_concat(x, printf('%.*c', 1000, '-'))) FROM ({_SERIES} SELECT x FROM s)",
    f"SELECT json_group_array(x) FROM ({_SERIES} SELECT x FROM s)",
    "WITH RECURSIVE d(v) AS (SELECT 'x' UNION ALL SELECT v || v FROM d) SELECT length(v) FROM d",
    "WITH RECURSIVE d(v) AS (SELECT zeroblob(1000) UNION ALL SELECT v || v FROM d) SELECT 1 FROM d",
    "SELECT " + ", ".join(["a"] * 300) + " FROM (SELECT zeroblob(999999) AS a)",
    "SELECT " + ", ".join(["a"] * 100) + " FROM (SELECT randomblob(999000) AS a)",
    f"{_SERIES} SELECT zeroblob(999000) FROM s LIMIT 700",
    f"{_SERIES} SELECT randomblob(500000), x FROM s",
    f"{_SERIES} SELECT printf('%.*c', 999000, 'z') FROM s",
    f"{_SERIES_1E5} SELECT randomblob(999999) AS b FROM s ORDER BY b",
]

PARSER_BOMBS = [
    "SELECT " + "(" * 10_000 + "1" + ")" * 10_000,
    "SELECT " + "(" * 5_000 + "1" + ")" * 5_000,
    "SELECT " + "(" * 500 + "1" + ")" * 500,
    "SELECT 1" + " + 1" * 4_000,
    "SELECT " + "-" * 15_000 + "1",
    "SELECT " + "NOT " * 3_000 + "1",
    "SELECT 1 WHERE 1 = " + "abs(" * 300 + "1" + ")" * 300,
    "SELECT " + "'x' || " * 3_000 + "'x'",
    _nested(150),
    _nested(1_000),
    "SELECT 1 " + "UNION ALL SELECT 1 " * 10_000,
    "SELECT 1 " + "UNION ALL SELECT 1 " * 60,
    "SELECT 1 " + "UNION SELECT 1 " * 200,
    "SELECT * FROM singer WHERE name IN (" + ", ".join(["'x'"] * 50_000) + ")",
    "SELECT '" + "x" * 1_000_000 + "'",
    "SELECT 1 -- " + "x" * 2_000_000,
    "SELECT " + " ".join(["1 AS c" + str(i) + "," for i in range(2_500)]) + " 1",
    "SELECT max(" + ", ".join(["1"] * 500) + ")",
    "SELECT ?",
    "SELECT ?999999",
    "SELECT :a, @b, $c",
    "SELECT * FROM singer WHERE name LIKE '" + "%a" * 1_000 + "'",
    "SELECT 'x' GLOB '" + "[" * 5_000 + "'",
    "SELECT json('" + "[" * 5_000 + "]" * 5_000 + "')",
]

ODD_TEXT = [
    "SELECT 'a\x00b'",
    "SELECT 1\x00; DELETE FROM singer",
    "\x00",
    "SELECT '\ud800'",
    "SELECT '\udcff\udcfe' FROM singer",
    "",
    "   \n\t  ",
    ";",
    ";;;",
    "-- only a comment",
    "/* unterminated comment",
    "SELECT 'unterminated",
    "\u202eSELECT 1",
    "\ufeffSELECT 1",
    "ＳＥＬＥＣＴ 1",
    "SELECT 1 FROM singer WHERE name = 'x' \u2028 AND 1 = 1 ; \u2029 DROP TABLE singer",
]

HOSTILE: dict[str, list[str]] = {
    "writes": WRITES,
    "attach": ATTACH,
    "pragmas": PRAGMAS,
    "extensions": EXTENSIONS,
    "transactions": TRANSACTIONS,
    "multi_statement": MULTI_STATEMENT,
    "runaway": RUNAWAY,
    "memory_bombs": MEMORY_BOMBS,
    "parser_bombs": PARSER_BOMBS,
    "odd_text": ODD_TEXT,
}

CAPPED = [
    f"{_SERIES} SELECT x FROM s",
    f"{_SERIES} SELECT x, x * 2, 'row ' || x FROM s",
    f"{_SERIES_1E5} SELECT a.x, b.x FROM s a, s b",
    "SELECT a.name, b.name, c.name, d.name FROM singer a, singer b, singer c, singer d,"
    " concert e, concert f",
    f"{_SERIES} SELECT printf('%.*c', 1000, 'y') FROM s",
    # Quadratic work inside one VM instruction, where the deadline cannot interrupt SQLite.
    f"SELECT instr({_BIG_A}, printf('%.*c', 100000, 'a') || 'b')",
    f"SELECT replace({_BIG_A}, printf('%.*c', 100000, 'a') || 'b', 'c') = 'x'",
    f"SELECT length(trim({_BIG_A}, printf('%.*c', 50000, 'b') || 'a'))",
    f"SELECT length(ltrim({_BIG_A}, printf('%.*c', 1000, 'b') || 'a'))",
    f"SELECT length(rtrim({_BIG_A}, printf('%.*c', 1000, 'b') || 'a'))",
    "SELECT instr(x.b, zeroblob(400000) || x'01') FROM (SELECT zeroblob(900000) AS b) AS x",
]

ODD_BUT_VALID = [
    ("SELECT CAST(x'ff80c328' AS TEXT)", "\ufffd"),
    ("SELECT char(0) || 'after-nul'", "after-nul"),
    ("SELECT 'rtl \u202e txet \u202c ok'", "\u202e"),
    ("SELECT 'bell\x07 esc\x1b[31m red'", "red"),
    ("SELECT 'line1' || char(10) || 'line2' || char(13) || 'x'", "line1\\nline2\\rx"),
    ("SELECT 'emoji 🎵 and ñ'", "🎵"),
    ("SELECT x'00ff'", "x'00ff'"),
    ("SELECT 1e308 * 10, -1e308 * 10, 0.0 / 0", "inf"),
    ("SELECT 9223372036854775807, -9223372036854775808", "9223372036854775807"),
    ("SELECT name FROM singer WHERE name = 'a;b' OR 1 = 1 -- ;", None),
]

BENIGN = [
    "SELECT count(*) FROM singer",
    "SELECT name, type FROM sqlite_master WHERE type = 'table' ORDER BY name",
    "SELECT sql FROM sqlite_master WHERE name = 'singer'",
    "SELECT * FROM sqlite_schema LIMIT 3",
    "SELECT s.name, count(c.concert_id) FROM singer s LEFT JOIN concert c"
    " ON 1 = 1 GROUP BY s.name ORDER BY 2 DESC, 1",
    "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 100)"
    " SELECT sum(x) FROM n",
    "WITH top AS (SELECT name, age FROM singer ORDER BY age DESC LIMIT 2) SELECT * FROM top",
    "SELECT name, age, rank() OVER (ORDER BY age DESC), avg(age) OVER () FROM singer",
    "SELECT name, row_number() OVER (PARTITION BY country ORDER BY age) FROM singer",
    "SELECT json_object('n', count(*)), json_group_array(name) FROM singer",
    "SELECT json_extract('{\"a\": [1, 2, 3]}', '$.a[1]'), json_array_length('[1,2]')",
    "SELECT upper(name), lower(country), length(name), substr(name, 1, 2) FROM singer",
    "SELECT printf('%5.2f|%d|%s', 3.14159, 42, 'x'), format('%03d', 7)",
    "SELECT replace('banana', 'an', 'AN'), instr('banana', 'nan'), trim('xxhixx', 'x')",
    "SELECT ltrim('  a  '), rtrim('--a--', '-'), trim(name) FROM singer",
    "SELECT CASE WHEN age > 30 THEN 'old' ELSE 'young' END FROM singer",
    "SELECT name FROM singer WHERE name LIKE '%a%' OR name GLOB '*e*'",
    "SELECT count(*) FROM singer WHERE singer_id IN (SELECT singer_id FROM singer WHERE age > 30)",
    "SELECT 1 UNION ALL SELECT 2 UNION SELECT 3 EXCEPT SELECT 2",
    "VALUES (1, 'a'), (2, 'b')",
    "SELECT date('2020-01-01', '+1 month'), strftime('%Y', '2021-06-01')",
    "SELECT abs(-1), round(2.5), coalesce(NULL, 1), nullif(1, 1), typeof(1.5)",
    "SELECT hex(randomblob(8)) IS NOT NULL, length(zeroblob(10))",
    "select  name  from  singer  ;  ;",
]
