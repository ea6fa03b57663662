-- Task records are written behind their transitions (see TaskRecordWriter): each row keeps the version of
-- the state it holds, so that a late write of an older state never replaces a newer one.
ALTER TABLE "tasks" ADD COLUMN     "record_version" INTEGER NOT NULL DEFAULT 0;
