-- A version-5 store made by tjob at commit 29fa95c (the last version-5 code), dumped with
-- Python's sqlite3 iterdump: four jobs (Complete, Failed with exit code 3, one that reported
-- progress, one retried once), their steps, events and progress. store_test migrates it.
BEGIN TRANSACTION;
CREATE TABLE admissions(
  job         TEXT PRIMARY KEY REFERENCES jobs(name) ON DELETE CASCADE,
  priority    INTEGER NOT NULL,
  seq         INTEGER NOT NULL,
  cpus        INTEGER NOT NULL,
  memory      INTEGER NOT NULL,
  gpus        INTEGER NOT NULL,
  grp         TEXT NOT NULL DEFAULT '',
  grp_limit   INTEGER NOT NULL DEFAULT 0,
  admitted    INTEGER NOT NULL,
  since_ms    INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE device_leases(
  device TEXT PRIMARY KEY,
  job    TEXT NOT NULL
);
CREATE TABLE events(
  seq     INTEGER PRIMARY KEY AUTOINCREMENT,
  job     TEXT NOT NULL REFERENCES jobs(name) ON DELETE CASCADE,
  step    TEXT NOT NULL,
  time_ms INTEGER NOT NULL,
  reason  TEXT NOT NULL,
  message TEXT NOT NULL,
  exit_code INTEGER,
  detail  TEXT NOT NULL DEFAULT ''
);
INSERT INTO "events" VALUES(1,'done-job','',1796419731619,'Created','created by process 3820: sh -c echo first line; echo second line',NULL,'');
INSERT INTO "events" VALUES(2,'done-job','node-0',1796419731636,'Started','process 3824 started (command): sh -c echo first line; echo second line',NULL,'');
INSERT INTO "events" VALUES(3,'done-job','node-0',1796419731637,'Exited','process 3824 ended: exit code 0',0,'');
INSERT INTO "events" VALUES(4,'failed-job','',1796419731671,'Created','created by process 3825: sh -c echo oops >&2; exit 3',NULL,'');
INSERT INTO "events" VALUES(5,'failed-job','node-0',1796419731686,'Started','process 3829 started (command): sh -c echo oops >&2; exit 3',NULL,'');
INSERT INTO "events" VALUES(6,'failed-job','node-0',1796419731688,'Exited','process 3829 ended: exit code 3',3,'exit code 3');
INSERT INTO "events" VALUES(7,'reported','',1796419731723,'Created','created by process 3830: python3 -c import tjob; tjob.report(progress=40, eta=12, loss=0.5); tjob.flush(); print("reported")',NULL,'');
INSERT INTO "events" VALUES(8,'reported','node-0',1796419731735,'Started','process 3834 started (command): python3 -c import tjob; tjob.report(progress=40, eta=12, loss=0.5); tjob.flush(); print("reported")',NULL,'');
INSERT INTO "events" VALUES(9,'reported','',1796419732130,'Progress','40%, 12s left: loss=0.5',NULL,'{"progress_percent":40,"estimated_remaining_seconds":12,"metrics":{"loss":"0.5"}}');
INSERT INTO "events" VALUES(10,'reported','node-0',1796419732218,'Exited','process 3834 ended: exit code 0',0,'');
INSERT INTO "events" VALUES(11,'retried','',1796419734097,'Created','created by process 3895: sh -c test -f /tmp/v5home/flag || { touch /tmp/v5home/flag; exit 4; }; echo ok (restarts: 1 restart, backoff 0 s x2 up to 60 s)',NULL,'');
INSERT INTO "events" VALUES(12,'retried','node-0',1796419734217,'Started','process 3900 started (command): sh -c test -f /tmp/v5home/flag || { touch /tmp/v5home/flag; exit 4; }; echo ok',NULL,'');
INSERT INTO "events" VALUES(13,'retried','node-0',1796419734224,'Restarting','attempt 1 of 2 failed (exit code 4): process 3900 ended: exit code 4; attempt 2 starts in 0 s',4,'exit code 4');
INSERT INTO "events" VALUES(14,'retried','node-0',1796419734225,'Started','process 3902 started (command): sh -c test -f /tmp/v5home/flag || { touch /tmp/v5home/flag; exit 4; }; echo ok',NULL,'');
INSERT INTO "events" VALUES(15,'retried','node-0',1796419734226,'Exited','process 3902 ended: exit code 0',0,'');
CREATE TABLE jobs(
  name        TEXT PRIMARY KEY,
  runtime     TEXT NOT NULL,
  num_nodes   INTEGER NOT NULL,
  created_ms  INTEGER NOT NULL,
  spec        TEXT NOT NULL,
  status      TEXT NOT NULL,
  reason      TEXT NOT NULL DEFAULT '',
  owner_pid   INTEGER NOT NULL,
  owner_start INTEGER NOT NULL
, array TEXT NOT NULL DEFAULT '', progress TEXT NOT NULL DEFAULT '', progress_ms INTEGER NOT NULL DEFAULT 0);
INSERT INTO "jobs" VALUES('done-job','',1,1796419731619,'{"trainer":{"kind":"command","command":["sh","-c","echo first line; echo second line"],"env":{},"working_dir":"/tmp","cpus":1,"memory":0},"executable":"/usr/bin/sh"}','Complete','',3820,6094283,'','',0);
INSERT INTO "jobs" VALUES('failed-job','',1,1796419731671,'{"trainer":{"kind":"command","command":["sh","-c","echo oops >&2; exit 3"],"env":{},"working_dir":"/tmp","cpus":1,"memory":0},"executable":"/usr/bin/sh"}','Failed','exit code 3',3825,6094290,'','',0);
INSERT INTO "jobs" VALUES('reported','',1,1796419731723,'{"trainer":{"kind":"command","command":["python3","-c","import tjob; tjob.report(progress=40, eta=12, loss=0.5); tjob.flush(); print(\"reported\")"],"env":{},"working_dir":"/tmp","cpus":1,"memory":0},"executable":"/root/.pyenv/shims/python3"}','Complete','',3830,6094295,'','{"progress_percent":40,"estimated_remaining_seconds":12,"metrics":{"loss":"0.5"}}',1796419732130);
INSERT INTO "jobs" VALUES('retried','',1,1796419734097,'{"trainer":{"kind":"command","command":["sh","-c","test -f /tmp/v5home/flag || { touch /tmp/v5home/flag; exit 4; }; echo ok"],"env":{},"working_dir":"/tmp","cpus":1,"memory":0},"executable":"/usr/bin/sh"}','Complete','',3895,6094532,'','',0);
CREATE TABLE steps(
  job       TEXT NOT NULL REFERENCES jobs(name) ON DELETE CASCADE,
  name      TEXT NOT NULL,
  status    TEXT NOT NULL,
  exit_code INTEGER,
  reason    TEXT NOT NULL DEFAULT '',
  pid       INTEGER NOT NULL DEFAULT 0,
  pid_start INTEGER NOT NULL DEFAULT 0, attempt INTEGER NOT NULL DEFAULT 1,
  PRIMARY KEY(job, name)
);
INSERT INTO "steps" VALUES('done-job','node-0','Complete',0,'',3824,0,1);
INSERT INTO "steps" VALUES('failed-job','node-0','Failed',3,'exit code 3',3829,6094293,1);
INSERT INTO "steps" VALUES('reported','node-0','Complete',0,'',3834,6094298,1);
INSERT INTO "steps" VALUES('retried','node-0','Complete',0,'',3902,6094547,2);
CREATE INDEX events_by_job ON events(job, seq);
CREATE INDEX jobs_by_status ON jobs(status);
CREATE INDEX admissions_order ON admissions(admitted, priority DESC, seq, cpus, memory, gpus, grp, grp_limit,
                                           since_ms);
DELETE FROM "sqlite_sequence";
INSERT INTO "sqlite_sequence" VALUES('events',15);
COMMIT;
PRAGMA application_id=1953132386;
PRAGMA user_version=5;
