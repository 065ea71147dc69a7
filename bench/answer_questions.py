"""The questions ``bench/answer.py`` calibrates abstention on: answerable ones (each with the shared
PDF and the page that answers it, read by a person) and unanswerable ones (nothing in the corpora
says), over the corpora of :data:`CORPORA` (the first pages of five shared PDFs)."""

from __future__ import annotations

CORPORA = {
    "walden": ("en_walden_thoreau_249p.pdf", 30),
    "irs": ("en_irs_i1040nr_instructions.pdf", 12),
    "creativity": ("en_paper_creativity_in_ml.pdf", 8),
    "relations": ("en_paper_naacl06_shinyama_2col.pdf", 8),
    "faa": ("en_federal_register_3col.pdf", 4),
}
"""Corpus -> (shared PDF, pages ingested from its start)."""

ANSWERABLE: list[tuple[str, str, int]] = [
    ("How long did the author live in the house by Walden Pond?", "walden", 5),
    ("Where did Thoreau build his house?", "walden", 5),
    (
        "What does the author say about the twelve labors of Hercules compared with his neighbors?",
        "walden",
        6,
    ),
    ("Why should one beware of enterprises that require new clothes?", "walden", 20),
    ("Which implements rank next to the necessaries of life?", "walden", 13),
    ("According to Liebig, what is the human body compared to?", "walden", 12),
    ("What was the author's purpose in going to Walden Pond?", "walden", 17),
    ("Which animals did the author say he had long ago lost?", "walden", 15),
    ("Whom do we worship instead of the Graces and the Parcae?", "walden", 21),
    ("What does the author think of the factory system as a way to get clothing?", "walden", 22),
    ("Who may use Form 1040NR-EZ instead of Form 1040NR?", "irs", 2),
    ("What is a dual-status tax year?", "irs", 5),
    ("Which private delivery services count for the timely mailing rule?", "irs", 4),
    ("At what rate is U.S. source income that is not effectively connected taxed?", "irs", 8),
    ("Which days do not count as days of presence for the substantial presence test?", "irs", 2),
    ("How does Tom Mitchell define machine learning?", "creativity", 1),
    ("How does Google DeepDream make a network show what it sees in an image?", "creativity", 2),
    ("Why were convolutional neural networks introduced for image data?", "creativity", 2),
    ("How does the AIKON system sketch portraits?", "creativity", 3),
    ("What is an n-gram language model?", "creativity", 3),
    ("What is Preemptive Information Extraction?", "relations", 1),
    ("What does Unrestricted Relation Discovery produce from texts?", "relations", 1),
    ("What is a basic pattern in the relation discovery system?", "relations", 2),
    ("Which hurricanes appear in the sample discovered relation?", "relations", 2),
    ("What would the proposed airworthiness directive for the Boeing 737 MAX require?", "faa", 1),
    ("What is the angle of attack of an airplane?", "faa", 2),
    ("By what date must the FAA receive comments on the proposed AD?", "faa", 1),
    ("What does the stick shaker on the 737 MAX do?", "faa", 2),
]
"""(question, corpus, page that answers it)."""

UNANSWERABLE: list[str] = [
    "What is the capital of France?",
    "How do I bake sourdough bread at home?",
    "Who won the football World Cup in 2014?",
    "What is the boiling point of water at high altitude?",
    "How do I reset my home Wi-Fi router?",
    "What are the symptoms of the common cold?",
    "How many moons does Jupiter have?",
    "What is the best way to train a puppy?",
    "Which programming language should I learn first?",
    "How do I change a flat bicycle tire?",
    "What is the recipe for a classic margherita pizza?",
    "When was the Eiffel Tower built?",
    "How much does a new electric car cost?",
    "What is the population of Tokyo?",
    "How do vaccines train the immune system?",
    "What time does the supermarket open on Sundays?",
    "How do I knit a scarf as a beginner?",
    "What is the plot of the movie Titanic?",
    "How do I apply for a passport in Germany?",
    "What is the stock price of Apple today?",
    "How many engines does the Airbus A380 have?",
    "How do I install solar panels on my roof?",
    "What is the best fertilizer for tomatoes?",
    "Who painted the Mona Lisa?",
    "How do I get a refund for a cancelled train ticket?",
]
