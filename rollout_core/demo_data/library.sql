-- A small lending library: authors, their books, members and loans during 2023.

CREATE TABLE authors (
    author_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    country TEXT NOT NULL,
    birth_year INTEGER NOT NULL
);

CREATE TABLE books (
    book_id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    author_id INTEGER NOT NULL REFERENCES authors (author_id),
    genre TEXT NOT NULL,
    published_year INTEGER NOT NULL,
    pages INTEGER NOT NULL
);

CREATE TABLE members (
    member_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    city TEXT NOT NULL,
    joined_year INTEGER NOT NULL
);

CREATE TABLE loans (
    loan_id INTEGER PRIMARY KEY,
    book_id INTEGER NOT NULL REFERENCES books (book_id),
    member_id INTEGER NOT NULL REFERENCES members (member_id),
    loan_date TEXT NOT NULL,
    returned INTEGER NOT NULL CHECK (returned IN (0, 1))
);

INSERT INTO authors (author_id, name, country, birth_year) VALUES
    (1, 'Mara Quillon', 'Canada', 1961),
    (2, 'Tobias Wren', 'England', 1948),
    (3, 'Ines Calderon', 'Spain', 1975),
    (4, 'Kenji Arata', 'Japan', 1982),
    (5, 'Olu Adeyemi', 'Nigeria', 1969),
    (6, 'Freya Lindqvist', 'Sweden', 1990),
    (7, 'Dario Ferrante', 'Italy', 1955),
    (8, 'Priya Natarajan', 'India', 1978),
    (9, 'Lucas Moreau', 'France', 1987),
    (10, 'Hana Novak', 'Czechia', 1993),
    (11, 'Samuel Okafor', 'Nigeria', 1984),
    (12, 'Greta Holm', 'Sweden', 1971);

INSERT INTO books (book_id, title, author_id, genre, published_year, pages) VALUES
    (1, 'The Salt Orchard', 1, 'Fiction', 2004, 312),
    (2, 'Harbour of Glass', 1, 'Fiction', 2011, 288),
    (3, 'Northern Ledger', 1, 'History', 2017, 402),
    (4, 'A Clockwork Meadow', 2, 'Fantasy', 1979, 356),
    (5, 'Lanterns Over Kell', 2, 'Fantasy', 1988, 410),
    (6, 'The Quiet Engine', 2, 'Science', 1996, 240),
    (7, 'Olive Winds', 3, 'Poetry', 2001, 96),
    (8, 'Cartographers of Dust', 3, 'Fiction', 2009, 344),
    (9, 'The Tenth Lighthouse', 3, 'Mystery', 2015, 276),
    (10, 'Paper Cranes at Dusk', 4, 'Fiction', 2012, 230),
    (11, 'Signals in the Snow', 4, 'Mystery', 2016, 318),
    (12, 'Rivers Remember', 4, 'Fiction', 2020, 264),
    (13, 'The Baobab Accord', 5, 'History', 1998, 452),
    (14, 'Market of Echoes', 5, 'Fiction', 2003, 301),
    (15, 'Songs for the Harmattan', 5, 'Poetry', 2010, 88),
    (16, 'Frostline', 6, 'Mystery', 2018, 290),
    (17, 'The Birch Protocol', 6, 'Mystery', 2021, 334),
    (18, 'Tidal Mechanics', 6, 'Science', 2022, 210),
    (19, 'Vesuvian Nights', 7, 'Fiction', 1983, 380),
    (20, 'The Mosaic Thief', 7, 'Mystery', 1991, 312),
    (21, 'A Short History of Bridges', 7, 'History', 1999, 268),
    (22, 'Monsoon Arithmetic', 8, 'Science', 2008, 226),
    (23, 'The Ninth Raga', 8, 'Fiction', 2013, 348),
    (24, 'Spice Routes Revisited', 8, 'History', 2019, 420),
    (25, 'Glass Cathedral', 9, 'Fantasy', 2014, 512),
    (26, 'The Last Cartwright', 9, 'Fantasy', 2017, 476),
    (27, 'Paris in Seven Stairs', 9, 'Fiction', 2023, 254),
    (28, 'Prague Fog', 10, 'Mystery', 2019, 266),
    (29, 'Small Orbits', 10, 'Science', 2021, 198),
    (30, 'The Weaver of Lagos', 11, 'Fiction', 2012, 330),
    (31, 'Copper Sun', 11, 'Fantasy', 2016, 390),
    (32, 'Counting Stars in Kano', 11, 'Science', 2020, 184),
    (33, 'Ember and Ash', 4, 'Fantasy', 2024, 428),
    (34, 'Letters from Kell', 2, 'Poetry', 1992, 120),
    (35, 'The Glass Apiary', 1, 'Mystery', 2023, 305),
    (36, 'Field Notes on Moss', 8, 'Science', 2024, 172);

INSERT INTO members (member_id, name, city, joined_year) VALUES
    (1, 'Alma Berg', 'Riverton', 2015),
    (2, 'Bruno Castell', 'Elmstead', 2017),
    (3, 'Chiara Dini', 'Riverton', 2019),
    (4, 'Dev Mehta', 'Brookfield', 2018),
    (5, 'Elena Sokol', 'Elmstead', 2021),
    (6, 'Farid Haddad', 'Ashford', 2016),
    (7, 'Gwen Tully', 'Riverton', 2022),
    (8, 'Hugo Brandt', 'Brookfield', 2020),
    (9, 'Isla Munro', 'Elmstead', 2021),
    (10, 'Jonas Weber', 'Ashford', 2014),
    (11, 'Keiko Sato', 'Riverton', 2023),
    (12, 'Liam Foley', 'Brookfield', 2019),
    (13, 'Maya Rosen', 'Elmstead', 2018),
    (14, 'Nils Ekdahl', 'Ashford', 2021),
    (15, 'Omar Said', 'Riverton', 2017),
    (16, 'Paula Reyes', 'Brookfield', 2022),
    (17, 'Quentin Hale', 'Elmstead', 2020),
    (18, 'Rosa Lindgren', 'Ashford', 2023),
    (19, 'Sven Aalto', 'Riverton', 2016),
    (20, 'Tara Quinn', 'Brookfield', 2015);

-- 160 loans spread unevenly over books and members through fixed arithmetic.
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 160)
INSERT INTO loans (loan_id, book_id, member_id, loan_date, returned)
SELECT
    i,
    CASE WHEN i % 8 = 0 THEN 25 ELSE ((i * 7 + (i * i) % 11) % 34) + 1 END,
    CASE WHEN i % 11 = 0 THEN 4 ELSE ((i * 13 + i / 9) % 20) + 1 END,
    date('2023-01-01', '+' || ((i * 37) % 365) || ' days'),
    CASE WHEN i % 6 = 0 THEN 0 ELSE 1 END
FROM n;
