//! Backup schedules (a cron expression, or a fixed interval): which tick is due now, and how many
//! were passed over since the last one. Level-triggered (computed from the last scheduled tick in
//! the status and the clock), so a restarted operator starts one catch-up backup, not one per
//! missed tick.

use croner::Cron;
use croner::parser::{CronParser, Seconds};
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::jiff::tz::TimeZone;

/// How many missed ticks are counted at most in one pass (a per-second schedule after a week
/// down would otherwise take a while to count).
const MAX_COUNTED: u64 = 100_000;

/// When backups run, in UTC.
#[derive(Debug, Clone)]
pub enum Schedule {
    Cron(Box<Cron>),
    /// Every so many seconds, at multiples of it since the Unix epoch (a restart keeps the ticks).
    Every(i64),
}

/// The tick to back up for now, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    /// The latest tick at or before now.
    pub tick: Timestamp,
    /// Ticks between the previous backup's tick and this one, which get no backup.
    pub skipped: u64,
}

impl Schedule {
    /// Parses 5 fields (minute first, as a CronJob) or 6 (seconds first). The error says why.
    pub fn parse(expression: &str) -> Result<Schedule, String> {
        let fields = expression.split_whitespace().count();
        if !(5..=6).contains(&fields) {
            return Err(format!(
                "{expression:?} has {fields} fields; a schedule has 5 (minute hour day month weekday) or 6 (second first)"
            ));
        }
        CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(expression)
            .map(|cron| Schedule::Cron(Box::new(cron)))
            .map_err(|error| format!("{expression:?} is not a cron schedule: {error}"))
    }

    /// Every `seconds` seconds; `None` for a non-positive interval (no repetition).
    pub fn every(seconds: i64) -> Option<Schedule> {
        (seconds > 0).then_some(Schedule::Every(seconds))
    }

    /// The first tick after `after`.
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        match self {
            Schedule::Cron(cron) => cron
                .find_next_occurrence(&after.to_zoned(TimeZone::UTC), false)
                .ok()
                .map(|zoned| zoned.timestamp()),
            Schedule::Every(seconds) => {
                let next = after.as_second().div_euclid(*seconds).checked_add(1)?;
                Timestamp::from_second(next.checked_mul(*seconds)?).ok()
            }
        }
    }

    /// The latest tick in `(after, now]` and how many earlier ones in that range were passed
    /// over; `None` when no tick is due.
    pub fn due(&self, after: Timestamp, now: Timestamp) -> Option<Due> {
        let mut tick = self.next_after(after).filter(|t| *t <= now)?;
        let cron = match self {
            Schedule::Cron(cron) => cron,
            Schedule::Every(seconds) => {
                let latest = now.as_second().div_euclid(*seconds) * seconds;
                let skipped = (latest - tick.as_second()) / seconds;
                return Some(Due {
                    tick: Timestamp::from_second(latest).ok()?,
                    skipped: u64::try_from(skipped).unwrap_or(0),
                });
            }
        };
        let mut skipped = 0;
        while let Some(next) = self.next_after(tick).filter(|t| *t <= now) {
            if skipped >= MAX_COUNTED {
                // Jump to the latest tick without counting the rest.
                let latest = cron
                    .find_previous_occurrence(&now.to_zoned(TimeZone::UTC), true)
                    .ok()
                    .map_or(next, |zoned| zoned.timestamp());
                return Some(Due {
                    tick: latest,
                    skipped,
                });
            }
            skipped += 1;
            tick = next;
        }
        Some(Due { tick, skipped })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn five_and_six_fields_parse_others_say_why() {
        assert!(Schedule::parse("0 3 * * *").is_ok());
        assert!(Schedule::parse("*/5 * * * * *").is_ok());
        let error = Schedule::parse("every day").unwrap_err();
        assert!(error.contains("2 fields"), "{error}");
        let error = Schedule::parse("61 * * * *").unwrap_err();
        assert!(error.contains("not a cron schedule"), "{error}");
    }

    #[test]
    fn the_latest_due_tick_runs_and_the_ones_before_are_skipped() {
        let every_5s = Schedule::parse("*/5 * * * * *").unwrap();
        let after = at("2026-11-23T10:00:00Z");
        assert_eq!(every_5s.due(after, at("2026-11-23T10:00:04Z")), None);
        assert_eq!(
            every_5s.due(after, at("2026-11-23T10:00:05Z")),
            Some(Due {
                tick: at("2026-11-23T10:00:05Z"),
                skipped: 0
            })
        );
        // Down for three ticks: one backup, for the latest.
        assert_eq!(
            every_5s.due(after, at("2026-11-23T10:00:17Z")),
            Some(Due {
                tick: at("2026-11-23T10:00:15Z"),
                skipped: 2
            })
        );
        let daily = Schedule::parse("0 3 * * *").unwrap();
        assert_eq!(
            daily.next_after(at("2026-11-23T10:00:00Z")),
            Some(at("2026-11-24T03:00:00Z"))
        );
    }

    #[test]
    fn an_interval_ticks_at_its_multiples_and_catches_up_once() {
        assert!(Schedule::every(0).is_none());
        let every_5s = Schedule::every(5).unwrap();
        let after = at("2026-11-23T10:00:00Z");
        assert_eq!(every_5s.next_after(after), Some(at("2026-11-23T10:00:05Z")));
        assert_eq!(every_5s.due(after, at("2026-11-23T10:00:04Z")), None);
        assert_eq!(
            every_5s.due(after, at("2026-11-23T10:00:17Z")),
            Some(Due {
                tick: at("2026-11-23T10:00:15Z"),
                skipped: 2
            })
        );
    }

    #[test]
    fn a_very_long_gap_is_counted_up_to_a_bound() {
        let every_second = Schedule::parse("* * * * * *").unwrap();
        let due = every_second
            .due(at("2026-11-20T00:00:00Z"), at("2026-11-23T00:00:00Z"))
            .unwrap();
        assert_eq!(due.tick, at("2026-11-23T00:00:00Z"));
        assert_eq!(due.skipped, MAX_COUNTED);
    }
}
