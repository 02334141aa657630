"""Write src/litforge/data/embedded/support_messages.jsonl: the multi-label text set `data=text` trains on offline.

Synthetic, and said so: each message joins one to three hand-written sentences, one per label it carries (billing,
bug, account, shipping, feature_request), with a greeting or sign-off sometimes around them and a few sentences that
carry no label (thanks, context). Fixed seed: running this again writes the same file.

    python scripts/make_support_messages.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src" / "litforge" / "data" / "embedded" / "support_messages.jsonl"

SENTENCES = {
    "billing": [
        "I was charged twice for my subscription this month.",
        "The invoice shows the wrong amount.",
        "Can you refund the last payment?",
        "My credit card was billed after I cancelled.",
        "Why did my monthly price go up?",
        "I need a copy of the receipt for my accounting team.",
        "The annual plan charge appeared twice on my statement.",
        "Please cancel the renewal and return the money.",
        "The discount code was not applied at checkout.",
        "I paid but the order still says payment pending.",
        "There is a fee on my bill that I do not understand.",
        "How do I change the card you charge every month?",
        "You took the payment but never sent an invoice.",
        "The VAT on my invoice is wrong.",
        "I was billed for three seats but we only use two.",
    ],
    "bug": [
        "The app crashes as soon as I open the settings page.",
        "The export button does nothing when I click it.",
        "I get an error 500 when I save a report.",
        "The page freezes and I have to reload it.",
        "Search results show items that were deleted.",
        "The mobile app closes by itself after the update.",
        "Images do not load on the dashboard anymore.",
        "The sync keeps failing with a timeout error.",
        "Dates are shown in the wrong time zone since yesterday.",
        "The chart is blank even though there is data.",
        "Notifications arrive twice for every message.",
        "The upload gets stuck at ninety percent.",
        "The screen goes white after I log in on Android.",
        "Filters reset every time I change the page.",
        "The PDF comes out with missing characters.",
    ],
    "account": [
        "I cannot log in to my account.",
        "The password reset email never arrives.",
        "Please delete my account and my data.",
        "How do I change the email address on my profile?",
        "My account was locked after too many attempts.",
        "I want to add a colleague as an admin.",
        "Two-factor authentication codes are not accepted.",
        "I forgot which email I signed up with.",
        "Can you merge my two accounts into one?",
        "My username shows someone else's name.",
        "I need to transfer ownership of the team account.",
        "The login link says it has expired.",
        "How can I turn off two-factor authentication on my profile?",
        "Someone else may have access to my account.",
        "I want to rename my organisation.",
    ],
    "shipping": [
        "My package has not arrived yet.",
        "The tracking number does not work.",
        "The parcel was delivered to the wrong address.",
        "The box arrived damaged and the item is broken.",
        "When will my order be shipped?",
        "The courier left the package outside in the rain.",
        "I received the wrong item in my delivery.",
        "Can I change the delivery address of my order?",
        "The delivery is two weeks late.",
        "Only half of my order was in the parcel.",
        "Do you ship to Canada?",
        "The tracking page has said in transit for ten days.",
        "I need express delivery for this order.",
        "The package was returned to the sender by mistake.",
        "The delivery driver never came although I was home.",
    ],
    "feature_request": [
        "It would be great to have a dark mode.",
        "Please add an option to export to Excel.",
        "Could you support single sign-on with Google?",
        "I would love a way to schedule reports.",
        "Please let us tag items with custom labels.",
        "An offline mode would help when I travel.",
        "Could the calendar sync with Outlook?",
        "We need an API endpoint for bulk updates.",
        "It would help to have keyboard shortcuts.",
        "Please add more languages to the interface.",
        "Can you add a way to archive old projects?",
        "A weekly summary email would be useful.",
        "I wish I could undo a deleted message.",
        "Please allow more than five users on the basic plan.",
        "Could you add a widget for the home screen?",
    ],
}
OPENINGS = ["Hi,", "Hello team,", "Hey,", "Good morning,", "Hi support,", "Dear support,"]
CLOSINGS = ["Thanks.", "Thank you!", "Please help.", "Regards, Sam", "Any update would be appreciated.", "Cheers."]
FILLER = [
    "I have been a customer for two years.",
    "This is the second time I write about this.",
    "I am using the latest version.",
    "It started last week.",
    "My colleague has the same issue.",
    "This is quite urgent for us.",
]


def message(rng: random.Random, labels: list[str]) -> dict[str, object]:
    parts = [rng.choice(SENTENCES[label]) for label in labels]
    if rng.random() < 0.3:
        parts.insert(rng.randrange(len(parts) + 1), rng.choice(FILLER))
    if rng.random() < 0.5:
        parts.insert(0, rng.choice(OPENINGS))
    if rng.random() < 0.5:
        parts.append(rng.choice(CLOSINGS))
    return {"text": " ".join(parts), "labels": sorted(labels)}


def main(rows: int = 600, seed: int = 0) -> None:
    rng = random.Random(seed)
    names = sorted(SENTENCES)
    out = []
    for _ in range(rows):
        k = rng.choices([1, 2, 3], weights=[5, 4, 1])[0]
        out.append(message(rng, rng.sample(names, k)))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("".join(json.dumps(row) + "\n" for row in out))
    print(f"wrote {len(out)} messages to {OUT}")


if __name__ == "__main__":
    main()
