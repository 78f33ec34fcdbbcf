// The store's schema and its migrations (store.cpp opens, creates and
// migrates with them).
#include "adapters/local/store_schema.hpp"

#include "core/job_state.hpp"

namespace tjob::detail {

const char* admissions_sql() {
  return R"sql(
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
ALTER TABLE jobs ADD COLUMN array TEXT NOT NULL DEFAULT '';
)sql";
}

const char* attempts_sql() {
  return R"sql(
ALTER TABLE steps ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1;
CREATE INDEX admissions_order ON admissions(admitted, priority DESC, seq, cpus, memory, gpus, grp, grp_limit,
                                           since_ms);
)sql";
}

const char* progress_sql() {
  return R"sql(
ALTER TABLE jobs ADD COLUMN progress TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN progress_ms INTEGER NOT NULL DEFAULT 0;
)sql";
}

// The steps table rebuilt WITHOUT ROWID: a step is found by its primary key
// (job, name), so one B-tree, not a table and an index beside it, is what a
// new job's steps cost to write. (Foreign keys are off while a store is
// migrated: they are turned on after, in store.cpp.)
const char* steps_without_rowid_sql() {
  return R"sql(
CREATE TABLE steps_v6(
  job       TEXT NOT NULL REFERENCES jobs(name) ON DELETE CASCADE,
  name      TEXT NOT NULL,
  status    TEXT NOT NULL,
  exit_code INTEGER,
  reason    TEXT NOT NULL DEFAULT '',
  pid       INTEGER NOT NULL DEFAULT 0,
  pid_start INTEGER NOT NULL DEFAULT 0,
  attempt   INTEGER NOT NULL DEFAULT 1,
  PRIMARY KEY(job, name)
) WITHOUT ROWID;
INSERT INTO steps_v6(job, name, status, exit_code, reason, pid, pid_start, attempt)
  SELECT job, name, status, exit_code, reason, pid, pid_start, attempt FROM steps;
DROP TABLE steps;
ALTER TABLE steps_v6 RENAME TO steps;
)sql";
}

// The events table as version 7 has it: the same columns, a plain rowid.
// (DROP TABLE takes the old one's index and sqlite_sequence row with it;
// the sqlite_sequence table itself stays, empty, as SQLite keeps it.)
const char* events_without_autoincrement_sql() {
  return R"sql(
CREATE TABLE event_seq(hwm INTEGER NOT NULL);
INSERT INTO event_seq(hwm)
  SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0),
             coalesce((SELECT max(seq) FROM events), 0));
CREATE TABLE events_v7(
  seq     INTEGER PRIMARY KEY,
  job     TEXT NOT NULL REFERENCES jobs(name) ON DELETE CASCADE,
  step    TEXT NOT NULL,
  time_ms INTEGER NOT NULL,
  reason  TEXT NOT NULL,
  message TEXT NOT NULL,
  exit_code INTEGER,
  detail  TEXT NOT NULL DEFAULT ''
);
INSERT INTO events_v7(seq, job, step, time_ms, reason, message, exit_code, detail)
  SELECT seq, job, step, time_ms, reason, message, exit_code, detail FROM events;
DROP TABLE events;
ALTER TABLE events_v7 RENAME TO events;
CREATE INDEX events_by_job ON events(job, seq);
)sql";
}

const char* schema_sql() {
  return R"sql(
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
);
CREATE TABLE steps(
  job       TEXT NOT NULL REFERENCES jobs(name) ON DELETE CASCADE,
  name      TEXT NOT NULL,
  status    TEXT NOT NULL,
  exit_code INTEGER,
  reason    TEXT NOT NULL DEFAULT '',
  pid       INTEGER NOT NULL DEFAULT 0,
  pid_start INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY(job, name)
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
CREATE INDEX events_by_job ON events(job, seq);
CREATE TABLE device_leases(
  device TEXT PRIMARY KEY,
  job    TEXT NOT NULL
);
CREATE INDEX jobs_by_status ON jobs(status);
)sql";
}

// The event names that are step transitions, as an SQL list ('Started',
// 'Exited', ...): all of them, or only those that end a step. They come from
// the vocabulary (job_state), as everywhere.
std::string transitions_sql(bool endings_only) {
  std::string list;
  for (auto e : all_log_events) {
    auto kind = transition_of(e);
    if (!kind || (endings_only && (*kind == event_kind::started || *kind == event_kind::restarting)))
      continue;
    list += std::string(list.empty() ? "" : ", ") + "'" + std::string(to_string(e)) + "'";
  }
  return list;
}

// A version-1 store: each step's last transition gets the exit code and
// reason its step row holds, which is what the fold of the log then gives.
std::string migrate_v1_to_v2_sql() {
  const std::string transitions = transitions_sql(false), endings = transitions_sql(true);
  return R"sql(
ALTER TABLE events ADD COLUMN exit_code INTEGER;
ALTER TABLE events ADD COLUMN detail TEXT NOT NULL DEFAULT '';
UPDATE events SET
  exit_code = (SELECT s.exit_code FROM steps s WHERE s.job = events.job AND s.name = events.step),
  detail = (SELECT s.reason FROM steps s WHERE s.job = events.job AND s.name = events.step)
WHERE step <> '' AND seq = (
  SELECT max(e.seq) FROM events e
  WHERE e.job = events.job AND e.step = events.step AND e.reason IN ()sql" +
         transitions + R"sql())
  AND reason IN ()sql" +
         endings + R"sql()
  AND EXISTS (SELECT 1 FROM steps s WHERE s.job = events.job AND s.name = events.step);
)sql";
}

}  // namespace tjob::detail
