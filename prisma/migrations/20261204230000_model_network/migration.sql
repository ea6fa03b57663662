-- AlterTable
ALTER TABLE "models" ADD COLUMN     "network" BOOLEAN NOT NULL DEFAULT false;

-- Models already in the catalog keep being served by network devices, as they were before this
-- column existed: an upgrade must not take a running fleet's models away from its network devices.
-- New models are not served by the network unless the admin says so (`model add --network`).
UPDATE "models" SET "network" = true;
