// The schema of the local store (store.cpp): its tables, its version and
// the migrations from older versions.
#pragma once

#include <string>

namespace tjob::detail {

inline constexpr int application_id = 0x746a6f62;  // "tjob"
// Version 2: events carry the step's exit code and reason (`detail`), so the
// status columns can be folded from the log (migrate_v1_to_v2).
// Version 3: the admission queue (`admissions`: the jobs waiting or admitted
// and not ended), and each job's array (`jobs.array`).
// Version 4: each step's attempt (`steps.attempt`; retries), and the queue's
// order as an index (`admissions_order`: admission reads the head of the
// queue, not all of it, from the index alone: it covers every column the
// planner reads).
// Version 5: each job's latest reported progress (`jobs.progress`, the JSON
// of its last Progress event, and `jobs.progress_ms`, when), a cache of its
// log as the status columns are.
// Version 6: `steps` is a WITHOUT ROWID table (one B-tree keyed by job and
// name instead of a table and its primary key's index: fewer pages written
// per new job).
// Version 7: `events` without AUTOINCREMENT, whose sqlite_sequence row every
// event read and wrote (a page in every commit). A seq must still never be
// handed out twice: a process that owns jobs reads the cancels other
// processes append after the last seq it saw (cancels_after), and plain
// rowids would hand out the newest seqs again once they were deleted with
// their job. So `event_seq` keeps the highest seq ever given (written when a
// job is deleted, not per event), and an event's seq is one past both it and
// the newest event's (next_event_seq_sql).
inline constexpr int schema_version = 7;

/// The tables of a version-2 store (a new store starts from them; an older
/// one was made with version 1's, which migrate_v1_to_v2_sql completes).
const char* schema_sql();
/// What version 3 adds: the admission queue and each job's array.
const char* admissions_sql();
/// What version 4 adds: each step's attempt and the queue's order index.
const char* attempts_sql();
/// What version 5 adds: each job's latest progress.
const char* progress_sql();
/// Version 6: the steps table rebuilt WITHOUT ROWID, its rows kept.
const char* steps_without_rowid_sql();
/// Version 7: the events table rebuilt without AUTOINCREMENT, its rows kept,
/// and `event_seq` made from its sqlite_sequence row.
const char* events_without_autoincrement_sql();
/// An expression (a scalar subquery): the seq the next event gets.
inline constexpr const char* next_event_seq_sql =
    "(SELECT max(hwm, coalesce((SELECT max(seq) FROM events), 0)) + 1 FROM event_seq)";
/// The event names that are step transitions, as an SQL list ('Started',
/// 'Exited', ...): all of them, or only those that end a step.
std::string transitions_sql(bool endings_only);
/// A version-1 store's events get the exit code and reason of their step.
std::string migrate_v1_to_v2_sql();

}  // namespace tjob::detail
