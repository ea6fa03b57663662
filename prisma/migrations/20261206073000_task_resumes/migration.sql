-- A task resumed on another device after output reached the client (issue 37): how many times, and which
-- device produced which part of the answer (docs/api.md, "Tasks").
-- AlterTable
ALTER TABLE "tasks" ADD COLUMN     "resumes" INTEGER NOT NULL DEFAULT 0,
ADD COLUMN     "segments" JSONB;

