//! How the class answered the presenter's question (`ackscope class`): before the reveal the
//! presenter's page shows how many have answered, never what; after it, every page shows each
//! round's counts beside the kernel's answer, so the class sees how its answers moved between
//! "vote" and "vote again" (peer instruction). Counts only: the room never says who chose what.

use ackscope_shared::lesson::Question;
use ackscope_shared::wire::ClassVotes;
use leptos::prelude::*;

/// One choice's share of a round, in whole percent of the round's votes (0 when none voted).
pub fn percent(count: u32, total: u32) -> u32 {
    match total {
        0 => 0,
        total => ((u64::from(count) * 100 + u64::from(total) / 2) / u64::from(total)) as u32,
    }
}

/// A round's name: the class's first vote, then each "vote again".
pub fn round_name(round: usize) -> String {
    match round {
        0 => "First vote".to_string(),
        1 => "Second vote".to_string(),
        n => format!("Vote {}", n + 1),
    }
}

/// The room's votes on `question` (already matched to the page's step): `presenter` pages also
/// see how many have answered while the round is open.
#[component]
pub fn ClassAnswers(votes: ClassVotes, question: Question, presenter: bool) -> impl IntoView {
    let answered = (presenter && !votes.revealed).then(|| {
        let text = format!("{} of {} answered", votes.answered, votes.students);
        view! { <p class="class-answered" data-testid="class-answered">{text}</p> }
    });
    // The rounds shown are the closed ones (the current one too once revealed), the oldest
    // first; the room keeps the last few.
    let asked = votes.asked as usize;
    let closed = if votes.revealed { asked } else { asked.saturating_sub(1) };
    let first_round = closed.saturating_sub(votes.rounds.len());
    let rounds = votes
        .rounds
        .iter()
        .enumerate()
        .map(|(i, counts)| {
            let total: u32 = counts.iter().sum();
            let rows = question
                .choices
                .iter()
                .enumerate()
                .map(|(choice, label)| {
                    let count = counts.get(choice).copied().unwrap_or(0);
                    let share = percent(count, total);
                    let class =
                        if choice == question.answer { "class-count answer" } else { "class-count" };
                    view! {
                        <div class=class data-testid="class-count" data-choice=choice.to_string() data-count=count.to_string()>
                            <span class="label">{label.clone()}</span>
                            <span class="bar"><span style=format!("width: {share}%")></span></span>
                            <span class="number">{format!("{count} ({share}%)")}</span>
                        </div>
                    }
                })
                .collect_view();
            let round = first_round + i;
            view! {
                <div class="class-round" data-testid="class-round" data-round=round.to_string() data-votes=total.to_string()>
                    <p class="class-round-name">{format!("{}: {total} answers", round_name(round))}</p>
                    {rows}
                </div>
            }
        })
        .collect_view();
    view! {
        <div
            class="class-answers"
            data-testid="class-answers"
            data-answered=votes.answered.to_string()
            data-students=votes.students.to_string()
            data-round=votes.asked.saturating_sub(1).to_string()
        >
            {answered}
            {rounds}
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_whole_percent_of_the_round_and_none_is_zero() {
        assert_eq!(percent(1, 3), 33);
        assert_eq!(percent(2, 3), 67);
        assert_eq!(percent(3, 3), 100);
        assert_eq!(percent(0, 0), 0, "a round nobody answered");
        assert_eq!(percent(u32::MAX, u32::MAX), 100, "no overflow");
    }

    #[test]
    fn rounds_are_named_in_the_order_they_were_asked() {
        assert_eq!(round_name(0), "First vote");
        assert_eq!(round_name(1), "Second vote");
        assert_eq!(round_name(4), "Vote 5");
    }
}
