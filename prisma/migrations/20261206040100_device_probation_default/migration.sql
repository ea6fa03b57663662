-- A network device registered from now on starts on probation (docs/operations.md, "Trust"); the
-- registration sets a direct device trusted, as trust never holds one back.
-- AlterTable
ALTER TABLE "devices" ALTER COLUMN "trust" SET DEFAULT 'probation';
