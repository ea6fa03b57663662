-- An organization's resume switch: false keeps one device per answer (a streamed task whose device is lost
-- after output reached the client ends with `device_disconnected` instead of continuing on another device).
-- Every organization, existing ones included, allows resuming.
-- AlterTable
ALTER TABLE "organizations" ADD COLUMN     "resume" BOOLEAN NOT NULL DEFAULT true;
